# NATS JetStream destination (issue #36): sink URL validation; a pipeline
# streaming a random workload into a 3-replica stream on a three-node
# cluster (test/Nats.pm): one message per change and per logical message on
# <prefix>.<schema>.<table> / <prefix>._messages.<prefix>, headers and
# Nats-Msg-Id as docs/sink-protocol.md says, every change exactly once and in
# commit order, the stream's rows equal to the source's; names that are no
# subject token escaped.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/..";
use PostgreSQL::Test::Utils;
use Test::More;
use ReplicantTest;
use Nats;

Nats::require_server();

my $nats = Nats->start;
$nats->create_stream('S', 'replicant.p.>', duplicates_ms => 2000);
$nats->create_stream('T', 'app.db1.>');

my $node = ReplicantTest::new_node('nats');
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id int PRIMARY KEY, v text, n bigint, flag boolean);
	CREATE TABLE "My.Table" (id int PRIMARY KEY, v text);
	CREATE TABLE log (txn int PRIMARY KEY);
	CREATE PUBLICATION pub FOR TABLE t, "My.Table", log;
});

# 1. URLs: every part checked, nothing quoted back
my $hosts = join(',', map { "127.0.0.1:$_->{port}" } @{ $nats->{nodes} });
foreach my $case (
	[ "nats://$hosts", 'names no stream' ],
	[ "nats://$hosts/", 'stream name must have' ],
	[ "nats://$hosts/bad.stream", 'stream name must be letters' ],
	[ "nats://$hosts/S?subject_prefix=a..b", 'subject_prefix must be tokens' ],
	[ "nats://$hosts/S?subject_prefix=a.*", 'subject_prefix must be tokens' ],
	[ "nats://$hosts/S?subject_prefix=", 'subject_prefix must have' ],
	[ "nats://$hosts/S?secretive=1", 'unknown query parameter' ],
	[ "nats://$hosts/S?tls=maybe", 'tls must be true or false' ],
	[ "nats://user:hunter2\@127.0.0.1:4222/S", 'must not hold credentials' ],
	[ "nats://127.0.0.1:99999/S", 'invalid port' ],
	[ "nats://127.0.0.1:4222,/S", 'empty host' ],
	[ "nats://bad_host!:4222/S", 'not a name' ])
{
	my ($url, $expect) = @$case;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT replicant.create_pipeline('x', 'pub', '$url')");
	like($err, qr/\Q$expect\E/, "refused: $expect");
	unlike($err, qr/hunter2|99999|secretive|maybe|bad_host/, "the error quotes nothing of the URL ($expect)");
}
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT replicant.create_pipeline('x', 'pub', '" . $nats->url('S') . "', format => 'clickhouse')");
like($err, qr/format "clickhouse" cannot be delivered to NATS/, 'format clickhouse refused for NATS');

# 2. a pipeline and a random workload
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('p', 'pub', '" . $nats->url('S') . "', messages => true)");
$node->safe_psql('postgres',
	"SELECT replicant.create_pipeline('q', 'pub', '"
	  . $nats->url('T', 'subject_prefix=app.db1') . "')");

srand(100);
my $txns = 0;
sub workload
{
	my ($n) = @_;
	foreach (1 .. $n)
	{
		$txns++;
		my @sql = ("INSERT INTO log VALUES ($txns)");
		foreach (1 .. 1 + int(rand(6)))
		{
			my $id = 1 + int(rand(40));
			my $r  = rand();
			push @sql,
			  $r < 0.5
			  ? "INSERT INTO t VALUES ($id, 'v' || $txns, ${txns}::bigint * 1000000000, $txns % 2 = 0)"
			  . " ON CONFLICT (id) DO UPDATE SET v = excluded.v || 'u', n = excluded.n + 1"
			  : $r < 0.7 ? "DELETE FROM t WHERE id = $id"
			  : $r < 0.85 ? "INSERT INTO \"My.Table\" VALUES ($id, 'x\"y.z' || $txns) ON CONFLICT (id) DO UPDATE SET v = excluded.v"
			  : "SELECT pg_logical_emit_message(true, 'my.prefix', 'message $txns')";
		}
		$node->safe_psql('postgres', join(";\n", 'BEGIN', @sql, 'COMMIT'));
	}
}
workload(150);
foreach my $p ('p', 'q')
{
	is($node->safe_psql('postgres',
			"SELECT replicant.await_delivered('$p', pg_current_wal_lsn(), 120000)"),
		't', "$p: the workload is delivered");
}

sub check
{
	my ($stream, $pipeline, $prefix, $label) = @_;
	my @msgs = $nats->messages($stream);
	my @problems = Nats::problems(\@msgs, $pipeline);
	is_deeply([ @problems[ 0 .. ($#problems < 9 ? $#problems : 9) ] ], [], "$label: exactly once, in commit order");
	is_deeply(Nats::table_state(\@msgs, 'public', 't'),
		Nats::source_state($node, 'postgres', 't', ['id']), "$label: t equals the source");
	is_deeply(Nats::table_state(\@msgs, 'public', 'My.Table'),
		Nats::source_state($node, 'postgres', '"My.Table"', ['id']), "$label: \"My.Table\" equals the source");
	my %per_txn;
	my %logged;
	foreach my $m (@msgs)
	{
		my $c = $m->{json};
		if (($m->{headers}{'Replicant-Kind'} // '') eq 'message')
		{
			is($m->{subject}, "$prefix._messages.my%2Eprefix", "$label: message subject") if !$per_txn{msgsubj}++;
			next;
		}
		my $subject = "$prefix.public." . ($c->{table} eq 'My.Table' ? 'My%2ETable' : $c->{table});
		$per_txn{bad_subject}++ if $m->{subject} ne $subject;
		$per_txn{bad_headers}++
		  unless $m->{headers}{'Replicant-Pipeline'} eq $pipeline
		  && $m->{headers}{'Replicant-Xid'} =~ /^\d+$/
		  && ($m->{headers}{'Content-Type'} // '') eq 'application/json';
		$logged{ $c->{new}{txn} }++ if $c->{table} eq 'log';
	}
	ok(!$per_txn{bad_subject}, "$label: every change on <prefix>.<schema>.<table>");
	ok(!$per_txn{bad_headers}, "$label: pipeline, xid and content type headers");
	is(scalar(keys %logged), $txns, "$label: every transaction is in the stream");
	ok(!grep({ $_ != 1 } values %logged), "$label: no transaction twice");
	return \@msgs;
}
my $msgs = check('S', 'p', 'replicant.p', 'default prefix');
ok(grep({ ($_->{headers}{'Replicant-Kind'} // '') eq 'message' } @$msgs), 'logical messages are in the stream');
check('T', 'q', 'app.db1', 'subject_prefix');

# 3. a restart: nothing is written twice, whatever the checkpoint
$node->restart;
workload(20);
is($node->safe_psql('postgres',
		"SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'delivered after a restart');
check('S', 'p', 'replicant.p', 'after a restart');

is($node->safe_psql('postgres', "SELECT count(*) FROM replicant.status WHERE last_error <> ''"),
	'0', 'no errors');
done_testing();
