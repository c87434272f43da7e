"""The spark layer: a dataset frametrace wrote, read by Apache Spark as it
is (tests/README.md).  Skipped, saying why, where pyspark or Java is not
there; FRAMETRACE_SPARK_REQUIRED=1 (CI's spark stage, which installs them)
makes that a failure."""
