/*
 * gate_pack_tuner.h — what the gate-pack op hands the tuning engine (autotune/gpu_tune.h): its
 * candidate spaces (gate_pack_space.c) and the driver that compiles, verifies and times their
 * candidates on a device (gate_pack_tuner.c).
 */
#ifndef TWELL_GATE_PACK_TUNER_H
#define TWELL_GATE_PACK_TUNER_H

#include "gpu_tune.h"

/* The op's name in tuning records and reports. */
#define TW_GATE_PACK_OP "gate_pack"

/* The spaces of templates/gate_pack/gate_pack_sm90.cu.lua and gate_pack_simt.cu.lua. */
extern const tw_tune_space tw_gate_pack_space_sm90;
extern const tw_tune_space tw_gate_pack_space_simt;

/* The op "gate_pack": both spaces, sm90 preferred; one record for gated and non-gated shapes. */
extern const tw_tune_op tw_gate_pack_tune_op;

#endif /* TWELL_GATE_PACK_TUNER_H */
