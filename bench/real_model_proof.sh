#!/usr/bin/env bash
# Reruns one table of bench/RESULTS.md's real-model sections end to end (SmolLM2-135M-Instruct on
# CPU). Each table's results go under runs/proof/TABLE/ (one JSON per eval, one run dir per
# training run); a table stopped part-way goes on where it stopped when run again (done evals are
# skipped, training runs resume from their newest checkpoint).
#
#   bash bench/real_model_proof.sh baselines     # the policies without a model, every eval set
#                                                # and cap (seconds)
#   bash bench/real_model_proof.sh noise         # the eval's own noise floor: one checkpoint,
#                                                # groups_in_flight 4 and 1 (~15 min)
#   bash bench/real_model_proof.sh pass8         # zero-shot Pass@8 on the horizon-bound BabyAI
#                                                # levels (~1 h)
#   bash bench/real_model_proof.sh scalinginter  # ScalingInter vs fixed 2 vs fixed 6 on levels
#                                                # 14 and 21, SEEDS seeds each (hours per run)
#   bash bench/real_model_proof.sh babyai-rl     # pure RL on levels 5 and 7 (zero-shot Pass@8
#                                                # above 0) at cap 6: baselines, zero-shot, seeds
#   bash bench/real_model_proof.sh textcraft     # TextCraft depth 1, odd ids held out: the
#                                                # baselines, zero-shot, pure RL per seed
#   bash bench/real_model_proof.sh textcraft-sft # the same eval set: planner-demo SFT on the
#                                                # training ids, its eval, then RL from it per seed
#   bash bench/real_model_proof.sh search        # Deep Search, one-hop mix, disjoint held-out
#                                                # entities: the same rows
#   bash bench/real_model_proof.sh search-sft    # the same world: chain-finder demo SFT on
#                                                # training questions, its eval, RL from it
#
# MODEL (default runs/models/smollm2-135m-instruct: agentgym model fetch smollm2-135m-instruct
# MODEL), SEEDS (default "0 1 2"), ARMS (scalinginter's arms, default "stepwise short long"),
# PROOF_DIR (where the tables go, default runs/proof), LIMIT (eval tasks per set, default 20),
# FORCE=1 (scalinginter: train the arms even when the warm start's Pass@8 is 0), SETS (config
# overrides for every run and eval of the table, KEY=VALUE words without spaces; on a CPU without
# native bf16, no avx512_bf16 or amx_bf16 in /proc/cpuinfo, bf16 runs several times slower than
# float32 there: SETS="sft.bf16=false learner.bf16=false engine.bf16=false").
set -euo pipefail
cd "$(dirname "$0")/.."

TABLE=${1:?"usage: bash bench/real_model_proof.sh baselines|noise|pass8|scalinginter|babyai-rl|textcraft|textcraft-sft|search|search-sft"}
MODEL=${MODEL:-runs/models/smollm2-135m-instruct}
SEEDS=${SEEDS-0 1 2}  # SEEDS="" trains none (the baselines and zero-shot only)
LIMIT=${LIMIT:-20}
OUT=${PROOF_DIR:-runs/proof}/$TABLE
mkdir -p "$OUT"
EXTRA=()
for kv in ${SETS:-}; do
    EXTRA+=(--set "$kv")
done

# agentgym CMD ARGS...: the CLI, with SETS added to every new train, sft and eval (a resumed run
# keeps the settings it was started with).
agentgym() {
    local cmd=$1
    shift
    case $cmd in
    train | sft | eval) [ "${1:-}" = --resume ] || set -- "$@" "${EXTRA[@]}" ;;
    esac
    command agentgym "$cmd" "$@"
}

BABYAI=configs/smollm2-babyai.yaml
HORIZON=configs/smollm2-babyai-horizon.yaml
TEXTCRAFT=configs/smollm2-textcraft.yaml
SEARCH=configs/smollm2-search.yaml
# The horizon-bound levels (the bot's success within 2 / 4 / 6 / 13 turns in the recipe's
# header): OpenRedBlueDoorsDebug, PutNextLocalS6N4, GoToObjMazeS7, GoToSeqS5R2, UnlockLocalDist.
LEVELS="14 21 5 7 24"

need_model() {
    if [ ! -f "$MODEL/config.json" ]; then
        echo "no model at $MODEL: agentgym model fetch smollm2-135m-instruct $MODEL" >&2
        exit 2
    fi
}

# eval_once OUT_JSON ARGS...: runs agentgym eval ARGS --out OUT_JSON unless OUT_JSON exists.
eval_once() {
    local out=$1
    shift
    if [ -f "$out" ]; then
        echo "== $out: done already"
        return
    fi
    echo "== $out"
    agentgym eval "$@" --out "$out"  # written at the end: a stopped eval leaves no file
}

# warm_start CONFIG ENV DEMO_ARGS...: SFT into $warm on the demos `agentgym demos ENV DEMO_ARGS
# --worked-example` writes; $warm/sft.done marks a finished SFT, and a checkpoint without it is
# a stopped one, resumed.
warm_start() {
    local config=$1 env=$2
    shift 2
    [ -f "$warm/sft.done" ] && return
    [ -f "$warm/demos.jsonl" ] || agentgym demos "$env" "$@" --worked-example \
        --out "$warm/demos.jsonl"
    if [ -f "$warm/sft/checkpoints/latest" ]; then
        agentgym sft --resume "$warm"
    else
        agentgym sft "$config" --set "model.path=$MODEL" --set "run_dir=$warm" \
            --set "sft.data=[$warm/demos.jsonl]" --overwrite
    fi
    touch "$warm/sft.done"
}

# train_once RUN CONFIG ARGS...: `agentgym train CONFIG ARGS` into RUN, unless RUN finished
# already (its summary.json says exit 0); a run stopped or failed part-way resumes from its
# newest checkpoint (a stopped run writes a summary too, with exit 130).
train_once() {
    local run=$1
    shift
    if python -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["exit_code"] != 0)' \
        "$run/summary.json" 2>/dev/null; then
        echo "== $run: trained already"
    elif [ -d "$run/checkpoints" ]; then
        agentgym train --resume "$run"
    else
        agentgym train "$@"
    fi
}

# rl_from_warm CONFIG CAPS SETS...: the eval of the SFT warm start in $warm, then per seed an RL
# run from it and its eval; CAPS is the eval matrix of all of them.
rl_from_warm() {
    local config=$1 caps=$2
    shift 2
    eval_once "$OUT/warm.json" "$config" "$@" --set "run_dir=$warm" --set "model.path=$MODEL" \
        --checkpoint "$warm/sft/checkpoints" --caps "$caps"
    for seed in $SEEDS; do
        run=$OUT/rl-s$seed
        train_once "$run" "$config" --set "model.path=$MODEL" "$@" --set "run_dir=$run" \
            --set "actor.seed=$seed" --set "learner.seed=$seed" --init-from "$warm/sft/checkpoints"
        eval_once "$OUT/rl-s$seed.json" "$run/config.yaml" --checkpoint "$run/checkpoints" \
            --caps "$caps"
    done
}

# search_world: the search tables' world (shared by them, under PROOF_DIR/search/data): 720
# questions, half one-hop, the 400 held-out ones with entities of their own, which the strict
# check confirms; sets $data and $opts (the env options that point a config at it).
search_world() {
    data=${PROOF_DIR:-runs/proof}/search/data
    opts=(--set "env.options.index=$data/index" --set "env.options.qa=$data/qa.jsonl")
    [ -f "$data/qa.jsonl" ] || agentgym index generate "$data" --questions 720 --one-hop 0.5 \
        --held-out 400
    [ -d "$data/index" ] || agentgym index build "$data/corpus.jsonl" "$data/index"
    agentgym index check "$data" --train 0:320 --eval 320:720 --strict
}

# pure_rl CONFIG RUN_PREFIX CAPS SETS...: zero-shot, then per seed a pure-RL run from the
# instruct model and its eval; CAPS is the eval matrix of both.
pure_rl() {
    local config=$1 prefix=$2 caps=$3
    shift 3
    eval_once "$OUT/zero-shot.json" "$config" --set "model.path=$MODEL" "$@" \
        --set "run_dir=$OUT/zero-shot" --checkpoint "$MODEL" --caps "$caps"
    for seed in $SEEDS; do
        run=$OUT/$prefix-s$seed
        train_once "$run" "$config" --set "model.path=$MODEL" "$@" --set "run_dir=$run" \
            --set "actor.seed=$seed" --set "learner.seed=$seed"
        eval_once "$OUT/$prefix-s$seed.json" "$run/config.yaml" --checkpoint "$run/checkpoints" \
            --caps "$caps"
    done
}

case "$TABLE" in
baselines)
    need_model  # the recipes read the model's context length at load (no model runs here)
    for policy in "constant:go to red ball 1" scripted copy-example bot; do
        slug=$(echo "$policy" | tr -c 'a-z0-9\n' '-')
        eval_once "$OUT/levels01_$slug.json" "$BABYAI" --set "run_dir=$OUT/babyai" \
            --policy "$policy" --caps 1,2,4,6
        for level in $LEVELS; do
            eval_once "$OUT/level${level}_$slug.json" "$HORIZON" --set "run_dir=$OUT/babyai" \
                --set "tasks.eval.levels=[$level]" --set "tasks.eval.limit=$LIMIT" \
                --policy "$policy" --caps 2,4,6,13
        done
    done
    for policy in "constant:get 1 birch logs" scripted bot; do
        slug=$(echo "$policy" | tr -c 'a-z0-9\n' '-')
        eval_once "$OUT/textcraft_$slug.json" "$TEXTCRAFT" --set "run_dir=$OUT/textcraft" \
            --policy "$policy" --caps 2,4,8
    done
    ;;
noise)
    need_model
    for gif in 4 1; do
        eval_once "$OUT/groups_in_flight_$gif.json" "$BABYAI" --set "run_dir=$OUT/babyai" \
            --set "model.path=$MODEL" --set "eval.groups_in_flight=$gif" --checkpoint "$MODEL"
    done
    python bench/eval_noise.py "$OUT/groups_in_flight_4.json" "$OUT/groups_in_flight_1.json"
    ;;
pass8)
    need_model
    for level in $LEVELS; do
        eval_once "$OUT/level$level.json" "$HORIZON" --set "run_dir=$OUT/babyai" \
            --set "model.path=$MODEL" --set "tasks.eval.levels=[$level]" \
            --set "tasks.eval.limit=$LIMIT" --set eval.samples=8 --set eval.temperature=0.7 \
            --set eval.horizon_cap=6 --checkpoint "$MODEL"
    done
    ;;
scalinginter)
    need_model
    # The warm start every arm and seed starts from: levels 14 and 21 give the instruct model
    # no success to rank (zero-shot Pass@8 0 on level 14), so RL begins after bot-demo SFT.
    warm=$OUT/warm
    warm_start "$HORIZON" babyai --tasks 0:4000 --levels 14,21
    # Pass@8 of the warm start on held-out tasks of both levels at cap 6 (T 0.7, as training
    # samples): GRPO learns only from groups with a success in them.
    eval_once "$OUT/warm.json" "$HORIZON" --set "run_dir=$warm" --set "model.path=$MODEL" \
        --set "tasks.eval.limit=$LIMIT" --set eval.samples=8 --set eval.temperature=0.7 \
        --checkpoint "$warm/sft/checkpoints" --caps 6
    if [ "${FORCE:-0}" != 1 ] && python - "$OUT/warm.json" <<'PY'
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))[0]["rows"]["babyai"]["pass@8"] == 0 else 1)
PY
    then
        echo "the warm start's Pass@8 is 0 ($OUT/warm.json): no group would have a success to" \
            "learn from; a stronger warm start first (FORCE=1 trains the arms anyway)" >&2
        exit 3
    fi
    # The warm start under the arms' own eval (their held-out tasks, samples and temperature):
    # what each arm's gain is measured from (paired by task: agentgym compare).
    eval_once "$OUT/warm-s.json" "$HORIZON" --set "run_dir=$warm" --set "model.path=$MODEL" \
        --checkpoint "$warm/sft/checkpoints" --caps 6
    # Evals run at cap 6 only: the prompt does not depend on the cap, so an episode cut at t turns
    # is the cap-6 episode's first t turns, and the eval's share solved within 2 and 4 turns is
    # the cap-2 and cap-4 row of the matrix (up to batching noise: the noise table).
    for seed in $SEEDS; do
        for arm in ${ARMS:-stepwise short long}; do
            case $arm in
            stepwise) horizon="{schedule: stepwise, rounds: [2, 4, 6], every: 8, strict: true}" ;;
            short) horizon="{schedule: fixed, cap: 2}" ;;
            long) horizon="{schedule: fixed, cap: 6}" ;;
            esac
            run=$OUT/$arm-s$seed
            sets=(--set "model.path=$MODEL" --set "run_dir=$run" --set "actor.seed=$seed"
                --set "learner.seed=$seed" --set "learner.horizon=$horizon")
            train_once "$run" "$HORIZON" "${sets[@]}" --init-from "$warm/sft/checkpoints"
            eval_once "$OUT/$arm-s$seed.json" "$run/config.yaml" --checkpoint "$run/checkpoints" \
                --caps 6
        done
    done
    ;;
babyai-rl)
    need_model
    # Pure RL from the instruct model on the horizon-bound levels where its zero-shot Pass@8 is
    # above 0 (5 GoToObjMazeS7 0.2, 7 GoToSeqS5R2 0.1; 14, 21 and 24 are 0: the pass8 table), at
    # a fixed cap of 6. Evals at cap 6 only: the share solved within 2 and 4 turns is the
    # cap-2 and cap-4 row (the prompt does not depend on the cap).
    levels=(--set "tasks.train.levels=[5, 7]" --set "tasks.eval.levels=[5, 7]"
        --set "learner.horizon={schedule: fixed, cap: 6}")
    for policy in scripted bot; do
        eval_once "$OUT/baseline_$policy.json" "$HORIZON" --set "run_dir=$OUT/baselines" \
            "${levels[@]}" --policy "$policy" --caps 2,4,6,13
    done
    pure_rl "$HORIZON" rl 6 "${levels[@]}"
    ;;
textcraft)
    need_model
    for policy in "constant:get 1 birch logs" scripted bot; do
        slug=$(echo "$policy" | tr -c 'a-z0-9\n' '-')
        eval_once "$OUT/baseline_$slug.json" "$TEXTCRAFT" --set "run_dir=$OUT/baselines" \
            --policy "$policy" --caps 2,4
    done
    pure_rl "$TEXTCRAFT" rl 2,4
    ;;
textcraft-sft)
    need_model
    # Pure RL from the instruct model sees no success on these goals (the textcraft table), so
    # here RL starts from SFT on planner demos of the training ids (even), never the eval ones.
    warm=$OUT/warm
    warm_start "$TEXTCRAFT" textcraft --tasks 0:125:2
    rl_from_warm "$TEXTCRAFT" 2,4
    ;;
search)
    need_model
    search_world
    for policy in scripted copy-example bot; do
        eval_once "$OUT/baseline_$policy.json" "$SEARCH" "${opts[@]}" \
            --set "run_dir=$OUT/baselines" --policy "$policy" --caps 2,3,5
    done
    pure_rl "$SEARCH" rl 2,3,5 "${opts[@]}"
    ;;
search-sft)
    need_model
    # Pure RL from the instruct model sees no success on this world (the search table), so here
    # RL starts from SFT on the chain finder's demos of every fifth training question (64: 32
    # one-hop, 16 two-hop, 16 three-hop), never an eval one.
    search_world
    warm=$OUT/warm
    warm_start "$SEARCH" search --tasks 0:320:5 -o "index=$data/index" -o "qa=$data/qa.jsonl" \
        -o topk=1  # the recipe's env: one passage per search
    rl_from_warm "$SEARCH" 2,3,5 "${opts[@]}"
    ;;
*)
    echo "unknown table $TABLE (baselines, noise, pass8, scalinginter, babyai-rl, textcraft, textcraft-sft, search, search-sft)" >&2
    exit 2
    ;;
esac
