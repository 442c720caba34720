# replicant: stream committed changes from PostgreSQL to HTTP sinks.

EXTENSION   = replicant
MODULE_big  = replicant
OBJS = \
	src/module.o \
	src/replicant.o \
	src/shmem.o \
	src/launcher.o \
	src/worker.o \
	src/catalog.o \
	src/pipeline.o \
	src/decoder.o \
	src/slot.o \
	src/delivery.o \
	src/output_plugin.o \
	src/publication.o \
	src/encoder.o \
	src/guc_pin.o \
	src/backfill.o \
	src/chunk.o \
	src/batch.o \
	src/headers.o \
	src/change.o \
	src/format.o \
	src/format_clickhouse.o \
	src/format_replicant.o \
	src/sink_ddl.o \
	src/sink_http.o \
	src/snapshot.o \
	src/signing.o \
	src/checkpoint.o \
	src/fault.o \
	src/redact.o \
	src/api.o \
	src/status.o

DATA        = $(wildcard sql/replicant--*.sql)
PG_CPPFLAGS = -I$(srcdir)/src
SHLIB_LINK  = -lcurl

REGRESS      = api encoder status
REGRESS_OPTS = --temp-config=test/generated.conf --temp-instance=./tmp_regress
REGRESS_PREP = test/generated.conf

TAP_TESTS   = 1
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
