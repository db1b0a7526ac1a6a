"""Tests of the job protocol library."""
