# replicant: stream committed changes from PostgreSQL to HTTP sinks.

EXTENSION   = replicant
MODULE_big  = replicant
OBJS = \
	src/replicant.o \
	src/shmem.o \
	src/launcher.o \
	src/worker.o \
	src/pipeline.o \
	src/decoder.o \
	src/output_plugin.o \
	src/publication.o \
	src/encoder.o \
	src/batch.o \
	src/sink_http.o \
	src/signing.o \
	src/checkpoint.o \
	src/redact.o \
	src/api.o \
	src/status.o

DATA        = $(wildcard sql/replicant--*.sql)
PG_CPPFLAGS = -I$(srcdir)/src
SHLIB_LINK  = -lcurl

REGRESS      = api encoder status
REGRESS_OPTS = --temp-config=$(srcdir)/test/regress.conf --temp-instance=./tmp_check
NO_INSTALLCHECK = 1

TAP_TESTS   = 1
PROVE_FLAGS = -I $(srcdir)/test
PROVE_TESTS = test/t/*.pl

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
