"""What tests and benchmarks start to run against: a local Redis Cluster and Sentinel."""
