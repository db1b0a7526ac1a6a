package ambrosia.staging;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Staged records as a Spark source, read by the executors without Python:
 * {@code spark.read.format("ambrosia-staged").option("root", R).option("refs", S).load()}.
 *
 * <p>The segment format is the one {@code services/ambrosia_services/staging/segments.py} writes and documents.
 * {@code refs} names the blocks, one per line, each as nine fields separated by spaces:
 * {@code segment offset length check stream first last count size} (the check as an unsigned
 * decimal). The blocks are cut into partitions of about {@code partitionBytes} payload bytes
 * (a block is never split), in order. The result has one string column, {@code value}: one row
 * per record, in order within a partition; records that are not valid UTF-8 are decoded with
 * replacement characters.
 */
public final class StagedSource implements TableProvider, DataSourceRegister {
  public static final String NAME = "ambrosia-staged";
  static final StructType SCHEMA = new StructType().add("value", DataTypes.StringType, false);

  @Override
  public String shortName() {
    return NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new StagedTable();
  }

  static final class StagedTable implements SupportsRead {
    @Override
    public String name() {
      return NAME;
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> StagedScan.fromOptions(options);
    }
  }
}
