# replicant: stream committed changes from PostgreSQL to HTTP sinks.

EXTENSION   = replicant
MODULE_big  = replicant
OBJS = \
	src/module.o \
	src/replicant.o \
	src/shmem.o \
	src/metrics.o \
	src/event_log.o \
	src/dropdb.o \
	src/launcher.o \
	src/sync.o \
	src/worker.o \
	src/cpu_budget.o \
	src/fanout.o \
	src/fanout_outlet.o \
	src/fanout_reads.o \
	src/fanout_laggard.o \
	src/runs.o \
	src/catalog.o \
	src/install.o \
	src/pipeline.o \
	src/pipeline_options.o \
	src/pipeline_checks.o \
	src/destination.o \
	src/decoder.o \
	src/slot.o \
	src/slot_position.o \
	src/resync.o \
	src/resync_destinations.o \
	src/resync_table.o \
	src/destination_resync.o \
	src/slot_health.o \
	src/delivery.o \
	src/delivery_set.o \
	src/output_plugin.o \
	src/render_target.o \
	src/publication.o \
	src/publication_rules.o \
	src/table_shape.o \
	src/row_key.o \
	src/plugin_gate.o \
	src/epoch.o \
	src/waiver.o \
	src/pruning.o \
	src/pubfilter.o \
	src/partition_root.o \
	src/encoder.o \
	src/encode_types.o \
	src/encode_scalar.o \
	src/guc_pin.o \
	src/backfill.o \
	src/backfill_progress.o \
	src/backfill_plan.o \
	src/key_order.o \
	src/chunk.o \
	src/batch.o \
	src/headers.o \
	src/change.o \
	src/format.o \
	src/format_clickhouse.o \
	src/format_replicant.o \
	src/format_cloudevents.o \
	src/sink_ddl.o \
	src/stop_signal.o \
	src/sink_http.o \
	src/sink_http_answer.o \
	src/sink_http_headers.o \
	src/sink_http_loop.o \
	src/sink_nats.o \
	src/sink_nats_batch.o \
	src/sink_nats_body.o \
	src/sink_nats_connect.o \
	src/sink_nats_acks.o \
	src/sink_nats_stream.o \
	src/sink_nats_url.o \
	src/transport.o \
	src/transport_registry.o \
	src/snapshot.o \
	src/snapshot_plan.o \
	src/snapshot_shard.o \
	src/table_read.o \
	src/signing.o \
	src/checkpoint.o \
	src/checkpoint_floor.o \
	src/fault.o \
	src/redact.o \
	src/api.o \
	src/api_xact.o \
	src/api_run.o \
	src/api_destination.o \
	src/api_definitions.o \
	src/status.o

DATA        = $(wildcard sql/replicant--*.sql)
PG_CPPFLAGS = -I$(srcdir)/src
SHLIB_LINK  = -lcurl -lnats

REGRESS      = api encoder status
REGRESS_OPTS = --temp-config=test/generated.conf --temp-instance=./tmp_regress
REGRESS_PREP = test/generated.conf

TAP_TESTS   = 1

EXTRA_CLEAN = $(UNIT_TESTS)
PROVE_TESTS = test/t/*.pl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks no header dependencies here: rebuild on any header change.
$(OBJS): $(wildcard $(srcdir)/src/*.h)

# Servers from 15.19 on load only the output plugins listed in
# output_plugin_libraries; older ones refuse the unknown setting.
test/generated.conf: FORCE
	cp $(srcdir)/test/regress.conf $@
	if "$(bindir)/postgres" --describe-config | grep -q '^output_plugin_libraries'; then \
		echo "output_plugin_libraries = 'pgoutput, test_decoding, replicant'" >> $@; \
	fi

.PHONY: FORCE
FORCE:

# clang-format 14 with the top-level .clang-format (docs/development.md).
CLANG_FORMAT ?= clang-format
FORMAT_FILES = $(sort $(wildcard src/*.c src/*.h))

format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES)

# Lists each file clang-format would change, then the first differences.
format-check:
	@$(CLANG_FORMAT) --version; status=0; \
	for f in $(FORMAT_FILES); do \
		n=$$($(CLANG_FORMAT) "$$f" | diff "$$f" - | grep -c '^<'); \
		[ "$$n" = 0 ] || { echo "$$f: $$n lines to reformat"; status=1; }; \
	done; \
	if [ $$status != 0 ]; then \
		for f in $(FORMAT_FILES); do $(CLANG_FORMAT) "$$f" | diff -u "$$f" -; done | head -n 80; \
		echo "format-check: run 'make format'"; \
	else echo "format-check: ok"; fi; \
	exit $$status

.PHONY: format format-check

# Unit tests of the pure modules, run without a server (docs/development.md).
UNIT_TESTS = test/unit/sink_http_answer_test test/unit/cpu_budget_test

test/unit/sink_http_answer_test: test/unit/sink_http_answer_test.c test/unit/unit_check.h src/sink_http_answer.c \
		src/sink_http_answer.h src/transport.h
	$(CC) $(CFLAGS) $(CPPFLAGS) -I$(srcdir)/src -o $@ \
		$(srcdir)/test/unit/sink_http_answer_test.c $(srcdir)/src/sink_http_answer.c \
		-L$(pkglibdir) -lpgcommon -lpgport -lcurl

test/unit/cpu_budget_test: test/unit/cpu_budget_test.c test/unit/unit_check.h src/cpu_budget.c src/cpu_budget.h
	$(CC) $(CFLAGS) $(CPPFLAGS) -I$(srcdir)/src -o $@ \
		$(srcdir)/test/unit/cpu_budget_test.c $(srcdir)/src/cpu_budget.c \
		-L$(pkglibdir) -lpgcommon -lpgport

unit: $(UNIT_TESTS)
	@for t in $(UNIT_TESTS); do ./$$t || exit 1; done

.PHONY: unit

# The Prometheus alert rules and their unit tests (promtool, from Debian's
# prometheus package; README, "Monitoring").
PROMTOOL ?= promtool

check-alerts:
	cd $(srcdir)/contrib/prometheus && $(PROMTOOL) check rules replicant-alerts.yml && \
		$(PROMTOOL) test rules replicant-alerts.test.yml && \
		PROMTOOL=$(PROMTOOL) bash ./mutants.sh

.PHONY: check-alerts
