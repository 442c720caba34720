# replicant.metrics through the real bridge (issue 35 item 2): Debian's
# prometheus-postgres-exporter with contrib/prometheus/queries.yaml, as a
# pg_monitor member, scraped every second by a real Prometheus server; read
# back through Prometheus's HTTP query API.
#
#   (a) every query of queries.yaml yields its metrics (no query error)
#   (b) a steady load (a procedure committing one row at a time, ~40 s):
#       rate(replicant_transactions_delivered_total) within 20 % of the
#       rate measured from the commit times
#   (c) histogram_quantile() over replicant_delivery_latency_seconds_bucket
#       gives a number
#   (d) the sink goes down: replicant_lag_seconds rises; it comes back:
#       replicant_lag_seconds falls to 0
#
# The binaries: $PROMETHEUS and $POSTGRES_EXPORTER, else Debian's in
# /usr/bin.  Both listen on 127.0.0.1 on free ports, with their data in the
# test's temporary directory; they stop with the test.  Without them the
# test is skipped, except under CI=true (.ci/run installs them), unless
# REPLICANT_NO_PROMETHEUS says why this system has none.
#
# versions: all (the exporter's queries read pg_replication_slots and the view)
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use PostgreSQL::Test::Cluster;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use Time::HiRes qw(time usleep);

my $prometheus = $ENV{PROMETHEUS} // '/usr/bin/prometheus';
my $exporter   = $ENV{POSTGRES_EXPORTER} // '/usr/bin/prometheus-postgres-exporter';
foreach my $binary ($prometheus, $exporter)
{
	next if -x $binary;
	plan skip_all => "$binary is not installed: $ENV{REPLICANT_NO_PROMETHEUS}"
	  if $ENV{REPLICANT_NO_PROMETHEUS};
	die "$binary is not installed, and CI=true needs it (apt-get install prometheus prometheus-postgres-exporter)\n"
	  if $ENV{CI};
	plan skip_all => "$binary is not installed (apt-get install prometheus prometheus-postgres-exporter)";
}
my $queries = "$FindBin::RealBin/../../contrib/prometheus/queries.yaml";
my $http = HTTP::Tiny->new(timeout => 30, keep_alive => 0);
my @running;

END
{
	my $status = $?;
	foreach my $h (@running)
	{
		eval { $h->kill_kill(grace => 10); 1 } or print STDERR "could not stop a server: $@";
	}
	$? = $status;
}

# Calls $check until it returns true (1) or $timeout seconds pass (0).
sub poll_sub
{
	my ($check, $timeout) = @_;
	my $deadline = time() + ($timeout // 60);
	while (time() < $deadline)
	{
		return 1 if $check->();
		usleep(200_000);
	}
	return 0;
}

# Starts a server; waits until $url answers 200.
sub start_server
{
	my ($name, $url, $cmd, %env) = @_;
	my $log = "$PostgreSQL::Test::Utils::log_path/090_prometheus_$name.log";
	local @ENV{ keys %env } = values %env;
	my $h = IPC::Run::start($cmd, '<', '/dev/null', '>>', $log, '2>>', $log);
	push @running, $h;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until ($http->get($url)->{status} == 200)
	{
		die "$name exited at start, see $log" unless $h->pumpable;
		die "$name did not answer at $url, see $log" if time() > $deadline;
		usleep(100_000);
	}
	note("$name: $url, log $log");
	return $h;
}

my $node = ReplicantTest::new_node('prom');
my $sink = ReplicantTest::start_sink();
$node->safe_psql('postgres', q{
	CREATE EXTENSION replicant;
	CREATE TABLE t (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE PUBLICATION pub FOR TABLE t;
	CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
	CREATE PROCEDURE load(n int, pause float8) LANGUAGE plpgsql AS $$
	BEGIN
		FOR i IN 1 .. n LOOP
			INSERT INTO t DEFAULT VALUES;
			COMMIT;
			PERFORM pg_sleep(pause);
		END LOOP;
	END $$;
});
$node->safe_psql('postgres', "SELECT replicant.create_pipeline('p', 'pub', '$sink->{url}')");
ok(ReplicantTest::poll($node, "SELECT state = 'streaming' FROM replicant.status"), 'streaming');

# The exporter, as the pg_monitor member, over the node's Unix socket.
my $exporter_port = PostgreSQL::Test::Cluster::get_free_port();
start_server('exporter', "http://127.0.0.1:$exporter_port/metrics",
	[ $exporter, "--web.listen-address=127.0.0.1:$exporter_port",
	  "--extend.query-path=$queries", '--disable-default-metrics', '--disable-settings-metrics' ],
	DATA_SOURCE_NAME => 'host=' . $node->host . ' port=' . $node->port
	  . ' user=monitor dbname=postgres sslmode=disable');

# (a) every query works: the exporter reports an error per failing query
my $scrape = '';
ok(poll_sub(sub {
	$scrape = $http->get("http://127.0.0.1:$exporter_port/metrics")->{content};
	return $scrape =~ /^replicant_transactions_delivered_total\{[^}]*pipeline="p"/m;
}), 'a: the exporter exports replicant_transactions_delivered_total');
foreach my $metric (qw(replicant_changes_delivered_total replicant_state replicant_lag_seconds
	replicant_retries_total replicant_delivery_latency_seconds_bucket
	replicant_delivery_latency_seconds_sum replicant_delivery_latency_seconds_count
	replicant_lag_bytes replicant_retained_wal_bytes replicant_worker_starts_total
	replicant_disabled_by_sink replicant_last_progress_timestamp_seconds))
{
	like($scrape, qr/^\Q$metric\E\{[^}]*pipeline="p"/m, "a: $metric is exported");
}
like($scrape, qr/^replicant_delivery_latency_seconds_bucket\{[^}]*le="\+Inf"/m, 'a: the +Inf bucket');
like($scrape, qr/^replicant_retries_total\{[^}]*status_class="5xx"/m, 'a: retries by status_class');
like($scrape, qr/^replicant_state\{[^}]*destination="default"/m, 'a: a sink\'s metrics name its destination');
like($scrape, qr/^replicant_transactions_delivered_total\{[^}]*destination="default"/m,
	'a: delivered counters name the destination');
like($scrape, qr/^replicant_worker_starts_total\{(?![^}]*destination=)[^}]*\}/m,
	'a: the pipeline\'s own metrics name no destination');
unlike($scrape, qr/^pg_exporter_user_queries_load_error\{[^}]*\} 1/m, 'a: queries.yaml loads');
like($scrape, qr/^pg_up(\{[^}]*\})? 1/m, 'a: the exporter reaches the server');

# Prometheus, scraping the exporter every second.
my $prom_port = PostgreSQL::Test::Cluster::get_free_port();
my $prom_dir  = PostgreSQL::Test::Utils::tempdir('prometheus');
PostgreSQL::Test::Utils::append_to_file("$prom_dir/prometheus.yml", <<"EOF");
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: replicant
    static_configs:
      - targets: ['127.0.0.1:$exporter_port']
EOF
start_server('prometheus', "http://127.0.0.1:$prom_port/-/ready",
	[ $prometheus, "--config.file=$prom_dir/prometheus.yml", "--storage.tsdb.path=$prom_dir/data",
	  "--web.listen-address=127.0.0.1:$prom_port" ]);

# The value of an instant query at $at (default now), or undef while there is none.
sub query
{
	my ($expr, $at) = @_;
	my $params = $http->www_form_urlencode({ query => $expr, defined $at ? (time => $at) : () });
	my $res = $http->get("http://127.0.0.1:$prom_port/api/v1/query?$params");
	return undef unless $res->{success};
	my $data = decode_json($res->{content})->{data};
	my $result = $data->{result};
	return $result->[1] if $data->{resultType} eq 'scalar';
	return undef unless @$result;
	return $result->[0]{value}[1];
}

sub poll_query
{
	my ($expr, $test, $timeout) = @_;
	my $value;
	my $ok = poll_sub(sub {
		$value = query($expr);
		return defined $value && $test->($value);
	}, $timeout);
	return ($ok, $value);
}

my ($ok, $value) = poll_query('replicant_state{pipeline="p"}', sub { $_[0] == 2 });
ok($ok, 'prometheus has scraped replicant_state 2 (streaming)');

# (b) a steady load
my $n = 800;
my $started = time();
$node->safe_psql('postgres', "CALL load($n, 0.04)");
my $ended = time();
my ($first, $last) = split /\|/, $node->safe_psql('postgres',
	"SELECT extract(epoch FROM min(at)), extract(epoch FROM max(at)) FROM t");
my $measured = ($n - 1) / ($last - $first);
note(sprintf('workload: %d transactions in %.1f s: %.1f/s', $n, $last - $first, $measured));
is($node->safe_psql('postgres', "SELECT replicant.await_delivered('p', pg_current_wal_lsn(), 120000)"),
	't', 'b: delivered');
# rate() over the middle of the load, once Prometheus has scraped past it.
my $window = int(($last - $first) / 2);
my $at = sprintf('%.3f', $first + ($last - $first) * 0.8);
($ok, $value) = poll_query("time() - $at", sub { $_[0] > 5 }, 120);
($ok, $value) = poll_query("rate(replicant_transactions_delivered_total{pipeline=\"p\"}[${window}s])", sub { 1 });
my $rate = query("rate(replicant_transactions_delivered_total{pipeline=\"p\"}[${window}s])", $at);
ok(defined $rate, "b: rate() over ${window}s at $at");
$rate //= 0;
note(sprintf('rate(replicant_transactions_delivered_total[%ds]) = %.2f/s, workload %.2f/s', $window, $rate, $measured));
ok(abs($rate - $measured) <= 0.2 * $measured,
	sprintf('b: rate() %.2f/s within 20 %% of the workload\'s %.2f/s', $rate, $measured));

# (c) the histogram
my $p99 = query('histogram_quantile(0.99, sum by (le) (rate(replicant_delivery_latency_seconds_bucket{pipeline="p"}[1m])))');
ok(defined $p99 && $p99 =~ /^[0-9.e+-]+$/ && $p99 > 0 && $p99 <= 10,
	'c: histogram_quantile(0.99) of the latency: ' . ($p99 // 'none') . ' s');

# (d) lag while the sink is down
$sink->stop;
$node->safe_psql('postgres', 'INSERT INTO t DEFAULT VALUES');
($ok, $value) = poll_query('replicant_lag_seconds{pipeline="p"}', sub { $_[0] >= 3 }, 180);
ok($ok, "d: replicant_lag_seconds rises while the sink is down ($value)");
($ok, $value) = poll_query('max_over_time(replicant_state{pipeline="p"}[10s])', sub { $_[0] == 3 }, 60);
ok($ok, 'd: replicant_state 3 (retrying)');
$sink->restart;
($ok, $value) = poll_query('replicant_lag_seconds{pipeline="p"}', sub { $_[0] == 0 }, 180);
ok($ok, 'd: replicant_lag_seconds falls to 0 once the sink is back');
($ok, $value) = poll_query('replicant_retries_total{pipeline="p",status_class="transport"}', sub { $_[0] >= 1 }, 60);
ok($ok, "d: replicant_retries_total{status_class=\"transport\"} counted ($value)");

$node->stop;
$sink->stop;
done_testing();
