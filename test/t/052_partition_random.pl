# Randomized: a partitioned table published via its root with a row filter
# and a column list; the sink must end up holding exactly what a PostgreSQL
# subscriber of the same publication holds.
#
#   two pgbench clients insert, update rows in and out of the filter, change
#     keys (within and across partitions) and delete; the pipeline's initial
#     snapshot starts while they run
#   without a truncate: the sink equals SELECT <listed columns> FROM root
#     WHERE <filter>, and the subscriber's rows
#   then one partition is truncated (not delivered when publishing via the
#     root, so its rows stay at the subscriber) and the workload goes on in
#     the other partitions (moving rows between them), never touching the
#     truncated partition's ids again (the subscriber would refuse a second
#     row with a key it kept): the sink still equals the subscriber
#
# The seed is printed; REPLICANT_SEED=<n> repeats a run.
#
# versions: all (partition roots, row filters, column lists)
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use PartitionRandom;

PartitionRandom::run(filtered => 1);
done_testing();
