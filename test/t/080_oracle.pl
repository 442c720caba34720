# The differential test (test/README.md, "Differential test"): seeded random
# histories of DML, publication and schema changes, replicant operations and
# faults, run against a replicant pipeline and a PostgreSQL subscriber of
# the same publications; the sink must hold exactly what the subscriber
# holds at every comparison point, and every batch must keep the
# invariants (commit order, one content per commit_lsn, no column outside
# the column list, no row outside the row filter, at most one re-delivered
# batch per crash, value-free halts).
#
# versions: all (publication semantics, generated columns per version)
#
# Without settings it runs the fixed CI seeds below.  Settings:
#   ORACLE_SEED=1,2,...     these seeds instead
#   ORACLE_HISTORY=FILE     replay a history file (a failing run writes one)
#   ORACLE_RANDOM=N         N fresh random seeds
#   ORACLE_SOAK_SECONDS=S   fresh seeds until S seconds have passed (from
#                           ORACLE_FIRST_SEED on, if set); the summary line
#                           goes to ORACLE_SUMMARY (test/soak.sh -o)
#   ORACLE_STEPS=N          steps per history (default 110)
#   ORACLE_SHRINK=S         shorten the first failing history for up to S seconds
#   ORACLE_MUTANT=NAME      run under a mutant of a -DREPLICANT_MUTANTS build
#                           (README: mutants); passes when a seed catches it
#   ORACLE_OUT=DIR          where history files go (default tmp_check/oracle)
use strict;
use warnings;
use File::Path qw(make_path);
use Cwd qw(abs_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/..";
use ReplicantTest;
use Oracle;
use OracleGen;

# The fixed seeds CI runs on every version: each passes today and together
# they cover every step kind (see test/README.md for how they were chosen,
# and for the seeds left out until the defects they find are fixed).  CI
# also replays every history file of test/oracle/.
my @CI_SEEDS = (491, 453, 5);

my $version = do
{
	my $probe = PostgreSQL::Test::Cluster->new('probe');
	$probe->pg_version->major;
};
my $out_dir = $ENV{ORACLE_OUT} // "$PostgreSQL::Test::Utils::tmp_check/oracle";
make_path($out_dir);
$out_dir = abs_path($out_dir);
my $steps = $ENV{ORACLE_STEPS} // 110;
my $mutant = $ENV{ORACLE_MUTANT};
# Every server the test starts (and restarts) carries the mutant.
$ENV{REPLICANT_MUTANT} = $mutant if $mutant;

sub replay_command
{
	my ($how) = @_;
	$how = "SUITE_CFLAGS=-DREPLICANT_MUTANTS ORACLE_MUTANT=$mutant $how" if $mutant;
	return $version == 15
	  ? "$how PG_TEST_PORT_DIR=/tmp/replicant-portlock bash .ci/suite.sh \"\$(bash test/private-pg.sh /var/tmp/pg-\$USER)\" test/t/080_oracle.pl"
	  : "$how bash test/pg-matrix.sh $version test/t/080_oracle.pl";
}

# Runs one history; returns its result, with the failure and the replay
# command reported.
sub run_one
{
	my ($history, $name) = @_;
	my $file = "$out_dir/$name.jsonl";
	OracleGen::write_history($history, $file);
	my $res = Oracle::run_history($history, label => $name, mutant => $mutant);
	my $summary = sprintf('%s: %d steps, %d comparisons, %.0f s', $name, $res->{steps}, $res->{compares}, $res->{seconds});
	if ($res->{ok})
	{
		pass($summary) unless $mutant;
		note("$summary: passed") if $mutant;
		return $res;
	}
	my $f = $res->{failure};
	my $line = "$name fails at step $f->{step}: $res->{signature}";
	if ($mutant)
	{
		note($line);
	}
	else
	{
		fail($line);
	}
	my $detail = length($f->{detail}) > 3000 ? substr($f->{detail}, 0, 3000) . ' ...' : $f->{detail};
	diag("$line\n$detail");
	diag('replay: ' . replay_command(defined $history->{seed} && !$history->{shrunk_from}
			? "ORACLE_SEED=$history->{seed}" . (($history->{length} // 110) != 110 ? " ORACLE_STEPS=$history->{length}" : '')
			: "ORACLE_HISTORY=$file"));
	diag("history: $file" . ($f->{kept} ? "; the sink's store and the policy: $f->{kept}" : ''));
	return $res;
}

sub shrink_and_report
{
	my ($history, $res, $name) = @_;
	return unless $ENV{ORACLE_SHRINK};
	my $short = Oracle::shrink($history, $res, seconds => $ENV{ORACLE_SHRINK}, mutant => $mutant);
	my $file = "$out_dir/$name-shrunk.jsonl";
	OracleGen::write_history($short, $file);
	diag(sprintf('%s shrunk from %d to %d steps in %d runs: %s', $name, $short->{shrunk_from},
			scalar(@{ $short->{steps} }), $short->{shrink_tries}, $file));
	diag('replay the shortest: ' . replay_command("ORACLE_HISTORY=$file"));
	return;
}

if ($ENV{ORACLE_HISTORY})
{
	my $history = OracleGen::read_history($ENV{ORACLE_HISTORY});
	delete $_->{n} for @{ $history->{steps} };
	my $res = run_one($history, 'replay');
	shrink_and_report($history, $res, 'replay') unless $res->{ok};
	done_testing();
	exit;
}

my @seeds;
my $soak = $ENV{ORACLE_SOAK_SECONDS};
if ($ENV{ORACLE_SEED})
{
	@seeds = split /,/, $ENV{ORACLE_SEED};
}
elsif ($ENV{ORACLE_RANDOM} || $soak)
{
	my $first = length($ENV{ORACLE_FIRST_SEED} // '') ? $ENV{ORACLE_FIRST_SEED} : int(rand(2**31));
	@seeds = map { $first + $_ } 0 .. ($soak ? 1_000_000 : $ENV{ORACLE_RANDOM} - 1);
}
else
{
	@seeds = @CI_SEEDS;
}

my $started = time();
my ($ran, $failures, $first_failing, $first_history, $first_res) = (0, 0, undef, undef, undef);
my $mutant_active = 0;
my (%signatures, $in_shapes, $first_unshaped, $unshaped_history, $unshaped_res);
foreach my $seed (@seeds)
{
	last if $soak && time() - $started > $soak;
	my $history = OracleGen::generate($seed, $version, steps => $steps);
	my $res = run_one($history, "seed-$seed");
	$ran++;
	$mutant_active ||= $res->{mutant_active};
	next if $res->{ok};
	# A mutant is caught by what the oracle checks, not by the runner
	# tripping over its own feet.
	if ($mutant && $res->{failure}{kind} eq 'runner')
	{
		note("seed $seed: a failure of the runner does not catch mutant $mutant");
		next;
	}
	$failures++;
	# A history with a shape of a known defect (OracleGen::features) is
	# expected to fail until that defect is fixed; the others are news.
	my @shapes = grep { /^shape:/ } keys %{ OracleGen::features($history) };
	$signatures{ $res->{signature} . (@shapes ? " [@{[ sort @shapes ]}]" : '') }++;
	if (@shapes)
	{
		$in_shapes++;
	}
	else
	{
		($first_unshaped, $unshaped_history, $unshaped_res) = ($seed, $history, $res) unless defined $first_unshaped;
	}
	if (!defined $first_failing)
	{
		($first_failing, $first_history, $first_res) = ($seed, $history, $res);
	}
	last if $mutant;    # caught
}
# CI also replays the histories of defects found before (test/oracle/, a
# few steps each): each must pass now.
my $ci = !$ENV{ORACLE_SEED} && !$ENV{ORACLE_RANDOM} && !$soak && !$mutant;
if ($ci)
{
	foreach my $file (sort glob("$FindBin::RealBin/../oracle/*.jsonl"))
	{
		my $history = OracleGen::read_history($file);
		delete $_->{n} for @{ $history->{steps} };
		my $name = $file =~ s{.*/}{}r =~ s/\.jsonl$//r;
		my $res = run_one($history, "history-$name");
		$ran++;
		next if $res->{ok};
		$failures++;
		($first_failing, $first_history, $first_res) = ($name, $history, $res) unless defined $first_failing;
	}
}

# The first failure without a known defect's shape is the one to shorten.
if (defined $first_unshaped)
{
	shrink_and_report($unshaped_history, $unshaped_res, "seed-$first_unshaped");
}
elsif (defined $first_failing)
{
	shrink_and_report($first_history, $first_res, "seed-$first_failing");
}

# The CI seeds together hold every kind of step (OracleGen::FEATURES).
if ($ci)
{
	my %covered;
	$covered{$_} = 1 for map { keys %{ OracleGen::features(OracleGen::generate($_, $version, steps => $steps)) } } @CI_SEEDS;
	my @missing = grep { !$covered{$_} } @OracleGen::FEATURES;
	ok(!@missing, 'the CI seeds hold every kind of step') or diag("missing: @missing");
}

if ($mutant)
{
	ok($mutant_active, "the library carries mutant $mutant (built with -DREPLICANT_MUTANTS)");
	ok(defined $first_failing, "mutant $mutant is caught"
		  . (defined $first_failing ? " by seed $first_failing: $first_res->{signature}" : ''));
}
my $summary = sprintf('oracle: seeds=%d failures=%d first failing seed=%s version=%d wall=%.0fs'
	  . ' (failures in known-defect shapes=%d, first failing seed without one=%s)',
	$ran, $failures, $first_failing // 'none', $version, time() - $started,
	$in_shapes // 0, $first_unshaped // 'none');
note($summary);
note("failures: $signatures{$_} x $_") for sort { $signatures{$b} <=> $signatures{$a} } keys %signatures;
if ($ENV{ORACLE_SUMMARY})
{
	open(my $fh, '>', $ENV{ORACLE_SUMMARY}) or die "cannot write $ENV{ORACLE_SUMMARY}: $!";
	print $fh "$summary\n";
	close($fh);
}
done_testing();
