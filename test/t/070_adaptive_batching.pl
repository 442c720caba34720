# Batching adapts to the load: a commit on an idle pipeline is delivered
# without waiting for replicant.batch_linger, however long it is, while the
# commits made during a request in flight share the next request, within
# batch_max_transactions.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;

# A linger no delivery below may wait for: each wait gives up far sooner.
my $node = ReplicantTest::new_node('batching', conf => "replicant.batch_linger = '60s'");
my $sink = ReplicantTest::start_sink();
my $wait_ms = 20000;

$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id bigserial PRIMARY KEY, v text);
	CREATE PUBLICATION pub FOR TABLE t;
});
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}', batch_max_transactions => 5)");
ok(ReplicantTest::poll($node,
	"SELECT state = 'streaming' FROM replicant.status WHERE pipeline = 'p'"),
	'pipeline streams');
is($node->safe_psql('postgres', 'SHOW replicant.batch_linger'), '1min',
	'batch_linger is a minute');

# One commit at a time, each only once the previous one was delivered: the
# pipeline is idle at every commit, the one before just delivered.
my @late;
foreach my $round (1 .. 5)
{
	my $delivered = $node->safe_psql('postgres', qq{
		INSERT INTO t (v) VALUES ('isolated $round');
		SELECT replicant.await_delivered('p', pg_current_wal_lsn(), $wait_ms);
	});
	push @late, $round unless $delivered eq 't';
}
is_deeply(\@late, [],
	"each isolated commit is delivered within ${wait_ms} ms while batch_linger is 60 s");
my @isolated = grep { grep { $_ eq 'public.t' } @{ $_->{tables} } }
  @{ $sink->stats->{accepted} };
is_deeply([ map { $_->{transactions} } @isolated ], [ 1, 1, 1, 1, 1 ],
	'each isolated commit went out in a request of its own');

# A slow sink: the first of 15 quick commits goes out alone and stays in
# flight for a second, long after the others committed; the 14 left take
# at least three requests of at most 5 (each in flight for a second).
$sink->control({ delay_ms => 1000 });
my $before = scalar @{ $sink->stats->{accepted} };
my $delivered = $node->safe_psql('postgres', qq{
	DO \$\$
	BEGIN
		FOR i IN 1 .. 15 LOOP
			INSERT INTO t (v) VALUES ('burst ' || i);
			COMMIT;
		END LOOP;
	END
	\$\$;
	SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000);
});
is($delivered, 't', 'the burst is delivered');
$sink->control({ clear => 1 });

my @accepted = @{ $sink->stats->{accepted} };
my @burst = map { $_->{transactions} }
  grep { grep { $_ eq 'public.t' } @{ $_->{tables} } } @accepted[ $before .. $#accepted ];
my $total = 0;
$total += $_ foreach @burst;
is($total, 15, 'every transaction of the burst is delivered once');
ok((grep { $_ > 1 } @burst),
	'commits made while a request was in flight share a request: ' . join(',', @burst));
ok(!(grep { $_ > 5 } @burst), 'no request holds more than batch_max_transactions');

my $status = $node->safe_psql('postgres',
	"SELECT state, last_error FROM replicant.status WHERE pipeline = 'p'");
is($status, 'streaming|', 'pipeline still streaming, no error');

done_testing();
