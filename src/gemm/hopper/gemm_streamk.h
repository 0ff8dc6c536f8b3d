/*
 * Former name of tile_scheduler.h, which holds the stream-K schedule now. Only src/runtime/env.c
 * still includes it (for WEAVE_HGEMM_GROUP_M); point that include at tile_scheduler.h and delete this
 * file.
 */
#ifndef WEAVE_GEMM_STREAMK_H
#define WEAVE_GEMM_STREAMK_H
#include "gemm/hopper/tile_scheduler.h"
#endif
