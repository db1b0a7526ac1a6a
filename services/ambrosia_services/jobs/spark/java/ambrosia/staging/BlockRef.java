package ambrosia.staging;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

/** One staged block, as a job's arguments name it (see {@link StagedSource}). */
final class BlockRef implements Serializable {
  private static final long serialVersionUID = 1L;

  final String segment;
  final long offset;
  final long length;
  final long check; // unsigned
  final long stream;
  final long first;
  final long last;
  final long count;
  final long size;

  BlockRef(String segment, long offset, long length, long check, long stream, long first,
           long last, long count, long size) {
    this.segment = segment;
    this.offset = offset;
    this.length = length;
    this.check = check;
    this.stream = stream;
    this.first = first;
    this.last = last;
    this.count = count;
    this.size = size;
  }

  /** The references of {@code text}: one per non-empty line. */
  static List<BlockRef> parseAll(String text) {
    List<BlockRef> refs = new ArrayList<>();
    int lineNumber = 0;
    for (String line : text.split("\n", -1)) {
      lineNumber++;
      if (line.isEmpty()) {
        continue;
      }
      String[] f = line.split(" ", -1);
      if (f.length != 9 || f[0].isEmpty() || f[0].contains("/")) {
        throw new IllegalArgumentException(
            "refs line " + lineNumber + " is not 'segment offset length check stream first last "
                + "count size': " + line);
      }
      try {
        refs.add(new BlockRef(f[0], Long.parseLong(f[1]), Long.parseLong(f[2]),
            Long.parseUnsignedLong(f[3]), Long.parseUnsignedLong(f[4]),
            Long.parseUnsignedLong(f[5]), Long.parseUnsignedLong(f[6]), Long.parseLong(f[7]),
            Long.parseLong(f[8])));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("refs line " + lineNumber + ": " + e.getMessage());
      }
    }
    return refs;
  }
}
