#!/bin/sh
# Writes the TF.js reference data of tests/e2e/test_e2e_real3.c into
# tests/e2e/data/real3/<model>/ (weights.safetensors, input0.npy,
# expected0.npy, case.json), with real_diff.js --no-kdc: seeded weights and
# inputs, tfjs 4.22's predictions; kdc is not run. The models are the
# real3 files whose weights are small enough to check in (< 130k params),
# plus tests/e2e/data/k3_not_equal_mask.json (the Keras 3 NotEqual mask
# node of Image-Caption-Generator, whose 6M weights are too big to keep).
# Deterministic: running it twice gives byte-identical files.
#   cd tests/reference && npm ci && sh gen_real3.sh
set -e
cd "$(dirname "$0")"
OUT=../e2e/data/real3
R=../frontend/data/real3
rm -rf "$OUT"
node real_diff.js --no-kdc --quiet --write "$OUT" --batch 2 \
  "$R/teriusbin__boston-house-price-predict__attention_model.json" \
  "$R/vyomshm__DeepAnomaly__lstm_model.json" \
  "$R/ansh2607__Solar-Power-Prediction__gru_model.json" \
  "$R/icemeteor__information-extraction__lstm_model.json" \
  "$R/02vansh__Speech-Emotion-Recognition__cnn_lstm_model.json"
node real_diff.js --no-kdc --quiet --write "$OUT" --batch 4 ../e2e/data/k3_not_equal_mask.json
