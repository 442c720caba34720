/*
 * transport_registry.h
 *		Which transport a sink URL opens.
 */
#ifndef REPLICANT_TRANSPORT_REGISTRY_H
#define REPLICANT_TRANSPORT_REGISTRY_H

#include "transport.h"

/*
 * Opens the transport config->url's scheme names, in CurrentMemoryContext.
 * Never call it in the postmaster.
 */
extern ReplicantTransport *replicant_transport_open(const ReplicantSinkConfig *config);

#endif /* REPLICANT_TRANSPORT_REGISTRY_H */
