/*
 * sink_nats.h
 *		The NATS JetStream transport: nats:// and tls:// sink URLs.
 */
#ifndef REPLICANT_SINK_NATS_H
#define REPLICANT_SINK_NATS_H

#include "transport.h"

extern ReplicantTransport *replicant_nats_transport_open(const ReplicantSinkConfig *config);

#endif /* REPLICANT_SINK_NATS_H */
