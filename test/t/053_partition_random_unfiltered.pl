# Test 052's randomized comparison with a PostgreSQL subscriber, without the
# row filter and the column list: publish_via_partition_root alone.
#
# versions: all (partition roots)
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use PartitionRandom;

PartitionRandom::run(filtered => 0);
done_testing();
