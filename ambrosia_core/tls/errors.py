"""TLS's errors, and one line for a failed handshake or a broken record
(``describe_tls_error``), naming the certificate problem where OpenSSL says which."""

from __future__ import annotations

import ssl

from ..errors import AmbrosiaError, UsageError

__all__ = ["InsecureListenError", "TlsConfigError", "TlsHandshakeError",
           "describe_tls_error"]


class TlsConfigError(UsageError):
    """The TLS options cannot be used: one of the three files without the others, a file
    that cannot be read, a key that does not match its certificate."""


class InsecureListenError(UsageError):
    """A process was asked to listen beyond loopback without TLS and without
    ``--insecure``."""


class TlsHandshakeError(AmbrosiaError, ConnectionError):
    """A TLS handshake failed; the message names the peer and why in one line (an
    untrusted, expired or wrong certificate, none at all, or a peer that speaks no TLS)."""


# OpenSSL's verification results that users meet, in words that say what to fix.
_VERIFY = {
    10: "its certificate has expired",
    9: "its certificate is not valid yet",
    18: "its certificate is self-signed and not in --tls-ca",
    19: "its certificate is not signed by a CA in --tls-ca",
    20: "its certificate is not signed by a CA in --tls-ca",
    21: "its certificate is not signed by a CA in --tls-ca",
    62: "its certificate does not name the host dialled",
}
# Alerts the other end sends when it refused ours.
_ALERTS = {
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the peer refused our certificate: it has expired",
    "TLSV1_ALERT_UNKNOWN_CA": "the peer refused our certificate: its CA is not one the "
                              "peer trusts",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the peer refused our certificate",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the peer requires a certificate and we sent none",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "the peer sent no certificate",
    "WRONG_VERSION_NUMBER": "the peer does not speak TLS",
    "HTTP_REQUEST": "the peer does not speak TLS",
    "DECRYPTION_FAILED_OR_BAD_RECORD_MAC": "a record failed its integrity check (altered, "
                                           "replayed or cut in transit)",
    "SSLV3_ALERT_BAD_RECORD_MAC": "the peer found a record altered in transit",
    "UNEXPECTED_EOF_WHILE_READING": "the peer closed during the handshake",
}


def describe_tls_error(err: BaseException) -> str:
    """One line for a failed handshake or a broken TLS record, naming the certificate
    problem where OpenSSL says which."""
    if isinstance(err, ssl.SSLCertVerificationError):
        said = _VERIFY.get(err.verify_code)
        if said is None:
            said = f"its certificate was refused: {err.verify_message}"
        return said
    if isinstance(err, ssl.CertificateError):
        return f"its certificate was refused: {err}"
    if isinstance(err, ssl.SSLError):
        reason = str(err.reason or "")
        if reason in _ALERTS:
            return _ALERTS[reason]
        if reason == "CERTIFICATE_VERIFY_FAILED":
            msg = str(err)
            for code, text in _VERIFY.items():
                if _VERIFY_WORDS.get(code, "\0") in msg:
                    return text
            return "its certificate was refused"
        return reason.lower().replace("_", " ") or str(err)
    if isinstance(err, TimeoutError):
        return "no handshake in time"
    if isinstance(err, ConnectionResetError | BrokenPipeError | EOFError):
        return "the peer closed the connection during the handshake (it may refuse our " \
               "certificate or speak no TLS)"
    if isinstance(err, OSError):
        return err.strerror or type(err).__name__
    return str(err) or type(err).__name__


# What OpenSSL's message says for each code, for errors that carry no code.
_VERIFY_WORDS = {10: "certificate has expired", 9: "certificate is not yet valid",
                 18: "self-signed certificate", 19: "self-signed certificate in certificate",
                 20: "unable to get local issuer certificate", 62: "Hostname mismatch"}
