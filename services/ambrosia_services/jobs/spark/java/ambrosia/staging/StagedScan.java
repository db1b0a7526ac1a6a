package ambrosia.staging;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The blocks of a batch, cut into partitions on the driver; each read by an executor. */
final class StagedScan implements Scan, Batch {
  static final long DEFAULT_PARTITION_BYTES = 8L << 20;

  private final String root;
  private final List<BlockRef> refs;
  private final long partitionBytes;

  private StagedScan(String root, List<BlockRef> refs, long partitionBytes) {
    this.root = root;
    this.refs = refs;
    this.partitionBytes = partitionBytes;
  }

  static StagedScan fromOptions(CaseInsensitiveStringMap options) {
    String root = options.get("root");
    if (root == null || root.isEmpty()) {
      throw new IllegalArgumentException(StagedSource.NAME + ": the 'root' option is required");
    }
    long partitionBytes = options.getLong("partitionBytes", DEFAULT_PARTITION_BYTES);
    if (partitionBytes <= 0) {
      throw new IllegalArgumentException(StagedSource.NAME + ": partitionBytes must be positive");
    }
    return new StagedScan(root, BlockRef.parseAll(options.getOrDefault("refs", "")),
        partitionBytes);
  }

  @Override
  public StructType readSchema() {
    return StagedSource.SCHEMA;
  }

  @Override
  public String description() {
    return StagedSource.NAME + " [" + refs.size() + " blocks under " + root + "]";
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    List<InputPartition> parts = new ArrayList<>();
    List<BlockRef> run = new ArrayList<>();
    long size = 0;
    for (BlockRef ref : refs) {
      if (!run.isEmpty() && size + ref.size > partitionBytes) {
        parts.add(new Part(root, run.toArray(new BlockRef[0])));
        run = new ArrayList<>();
        size = 0;
      }
      run.add(ref);
      size += ref.size;
    }
    if (!run.isEmpty()) {
      parts.add(new Part(root, run.toArray(new BlockRef[0])));
    }
    return parts.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new Factory();
  }

  static final class Part implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String root;
    final BlockRef[] refs;

    Part(String root, BlockRef[] refs) {
      this.root = root;
      this.refs = refs;
    }
  }

  static final class Factory implements PartitionReaderFactory, Serializable {
    private static final long serialVersionUID = 1L;

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      Part part = (Part) partition;
      return new BlockReader(part.root, part.refs);
    }
  }
}
