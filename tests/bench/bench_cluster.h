/*
 * bench_cluster.h - what bench_cluster.c's parts share: figure 8c's rows
 * (bench_cluster_hit.c), run over the bench's Redis server, each a median of runs.
 */
#ifndef KPC_BENCH_CLUSTER_H
#define KPC_BENCH_CLUSTER_H

#include "../cluster_support.h"

void bench_cluster_hit_rows(const tc_redis *redis, int runs);

#endif
