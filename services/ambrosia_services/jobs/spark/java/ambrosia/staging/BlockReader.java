package ambrosia.staging;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

import net.jpountz.xxhash.XXHash64;
import net.jpountz.xxhash.XXHashFactory;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads a partition's blocks, one after the other, and checks each as
 * {@code ambrosia_services.staging.read_block} does: the whole block is there, its XXH64 matches the
 * reference and its own check bytes, and its header names the reference's stream, ids, count
 * and size. A problem fails the task with one line that starts with the Python error's name,
 * so the runner reports it as it does for the Python reader.
 */
final class BlockReader implements PartitionReader<InternalRow> {
  private static final byte[] BLOCK_MAGIC = {'B', 'L', 'K', '1'}; // BLK2: with ids and keys
  private static final int HEADER = 4 + 4 + 8 * 4;
  private static final int CHECK = 8;
  private static final XXHash64 XXH64 = XXHashFactory.fastestJavaInstance().hash64();
  private static final Logger LOG = LoggerFactory.getLogger(BlockReader.class);

  private final String root;
  private final BlockRef[] refs;
  private int next; // the next reference to load
  private byte[] block = new byte[0];
  private ByteBuffer view = ByteBuffer.wrap(block);
  private int count; // records of the loaded block
  private int index; // the next record of the loaded block
  private int offsets; // where the offsets start in the block
  private int data; // where the data starts in the block
  private InternalRow current;
  private long records; // read so far
  private long bytes; // of the blocks loaded so far

  BlockReader(String root, BlockRef[] refs) {
    this.root = root;
    this.refs = refs;
  }

  @Override
  public boolean next() throws IOException {
    while (index >= count) {
      if (next >= refs.length) {
        return false;
      }
      load(refs[next++]);
    }
    int start = view.getInt(offsets + 4 * index);
    int end = view.getInt(offsets + 4 * (index + 1));
    index++;
    records++;
    UTF8String value = UTF8String.fromBytes(block, data + start, end - start);
    if (!value.isValid()) {
      value = UTF8String.fromBytes(replaceInvalid(block, data + start, end - start));
    }
    current = new GenericInternalRow(new Object[] {value});
    return true;
  }

  @Override
  public InternalRow get() {
    return current;
  }

  @Override
  public void close() {
    block = new byte[0];
    if (next > 0) {
      LOG.info("read {} staged blocks ({} records, {} bytes) under {}", next, records, bytes,
          root);
    }
  }

  private void load(BlockRef ref) throws IOException {
    Path path = Paths.get(root, ref.segment);
    String where = "staged segment " + path + ", block at " + ref.offset;
    if (ref.length > Integer.MAX_VALUE - 8 || ref.length < HEADER + 4 + CHECK) {
      throw new StagedSegmentException("SegmentDamagedError", where + ": its lengths do not add up");
    }
    byte[] raw = new byte[(int) ref.length];
    int got = 0;
    try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
      ByteBuffer into = ByteBuffer.wrap(raw);
      while (into.hasRemaining()) {
        int n = channel.read(into, ref.offset + into.position());
        if (n < 0) {
          break;
        }
      }
      got = into.position();
    } catch (NoSuchFileException e) {
      throw new StagedSegmentException("SegmentMissingError", "staged segment " + path
          + " is missing (its block at " + ref.offset + " holds stream "
          + Long.toUnsignedString(ref.stream) + "'s messages " + Long.toUnsignedString(ref.first)
          + ".." + Long.toUnsignedString(ref.last) + ")");
    }
    if (got != raw.length) {
      throw new StagedSegmentException("SegmentDamagedError",
          where + ": cut short (" + got + " of " + ref.length + " bytes)");
    }
    ByteBuffer v = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
    long check = XXH64.hash(raw, 0, raw.length - CHECK, 0L);
    if (check != ref.check || v.getLong(raw.length - CHECK) != check) {
      throw new StagedSegmentException("SegmentDamagedError", where + ": damaged (its check bytes differ)");
    }
    boolean magic = raw[0] == BLOCK_MAGIC[0] && raw[1] == BLOCK_MAGIC[1]
        && raw[2] == BLOCK_MAGIC[2] && (raw[3] == '1' || raw[3] == '2');
    long blockCount = Integer.toUnsignedLong(v.getInt(4));
    if (!magic || blockCount != ref.count || v.getLong(8) != ref.stream
        || v.getLong(16) != ref.first || v.getLong(24) != ref.last || v.getLong(32) != ref.size) {
      throw new StagedSegmentException("SegmentDamagedError",
          where + ": holds another block than the reference names");
    }
    long dataStart = HEADER + 4 * (blockCount + 1);
    long end = dataStart + ref.size; // of the data; BLK2's ids and keys follow it
    long tail = ref.length - CHECK;
    if (end > tail) {
      throw new StagedSegmentException("SegmentDamagedError", where + ": its lengths do not add up");
    }
    if (raw[3] == '2') {
      long keyEnds = end + 8 * blockCount + 4 * blockCount; // the last key offset
      if (keyEnds + 4 > tail
          || keyEnds + 4 + Integer.toUnsignedLong(v.getInt((int) keyEnds)) != tail) {
        throw new StagedSegmentException("SegmentDamagedError",
            where + ": its lengths do not add up");
      }
    } else if (end != tail) {
      throw new StagedSegmentException("SegmentDamagedError", where + ": its lengths do not add up");
    }
    block = raw;
    bytes += raw.length;
    view = v;
    count = (int) blockCount;
    index = 0;
    offsets = HEADER;
    data = (int) dataStart;
    int previous = 0;
    for (int i = 0; i <= count; i++) { // the offsets must rise within the data
      long at = Integer.toUnsignedLong(v.getInt(offsets + 4 * i));
      if (at < previous || at > ref.size || (i == 0 && at != 0) || (i == count && at != ref.size)) {
        throw new StagedSegmentException("SegmentDamagedError",
            where + ": its record offsets are out of order");
      }
      previous = (int) at;
    }
  }

  private static final byte[] REPLACEMENT = {(byte) 0xEF, (byte) 0xBF, (byte) 0xBD};

  /**
   * The UTF-8 of {@code bytes[from, from + length)} with each maximal ill-formed subpart
   * replaced by U+FFFD, as Python's {@code decode("utf-8", "replace")} does (Java's own
   * decoder replaces a surrogate's three bytes with one character where Python gives three).
   */
  static byte[] replaceInvalid(byte[] bytes, int from, int length) {
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream(length + 16);
    int i = from;
    int end = from + length;
    while (i < end) {
      int b = bytes[i] & 0xFF;
      int need;
      int low = 0x80;
      int high = 0xBF; // the range of the second byte
      if (b < 0x80) {
        out.write(b);
        i++;
        continue;
      } else if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
      } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        low = b == 0xE0 ? 0xA0 : 0x80;
        high = b == 0xED ? 0x9F : 0xBF;
      } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        low = b == 0xF0 ? 0x90 : 0x80;
        high = b == 0xF4 ? 0x8F : 0xBF;
      } else {
        out.write(REPLACEMENT, 0, 3);
        i++;
        continue;
      }
      int k = 1; // bytes of the sequence that are well-formed so far
      while (k <= need && i + k < end) {
        int c = bytes[i + k] & 0xFF;
        int lo = k == 1 ? low : 0x80;
        int hi = k == 1 ? high : 0xBF;
        if (c < lo || c > hi) {
          break;
        }
        k++;
      }
      if (k == need + 1) {
        out.write(bytes, i, k);
      } else {
        out.write(REPLACEMENT, 0, 3);
      }
      i += k;
    }
    return out.toByteArray();
  }

  /** A staged block that cannot be read: the message is the one line the runner reports. */
  static final class StagedSegmentException extends IOException {
    private static final long serialVersionUID = 1L;

    StagedSegmentException(String kind, String line) {
      super(kind + ": " + line);
    }
  }
}
