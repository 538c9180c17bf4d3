#!/bin/sh
# Writes tests/e2e/real_fit_cases/<model>/ (the TF.js training references of
# tests/e2e/test_e2e_real_fit.c) with real_fit.js --write --no-kdc: the
# model file with its random layers off, seeded weights, data and labels,
# a ModelParallel layout, and tfjs' Keras 3 fit (history.json,
# final.safetensors); kdc is not run.  The models: real files of
# tests/frontend/data/real3 and real2 and ../shared/real-json whose tfjs fit
# takes a few seconds and whose weights are small enough to check in,
# chosen to cover the three optimizers, the five losses' families and the
# layer kinds: teriusbin (Dense, Multiply attention; mean_squared_error,
# SGD with momentum), Ekuaappiah (Dense; its compile_config's
# sparse_categorical_crossentropy, SGD with momentum), icemeteor (a frozen
# Embedding, LSTM; categorical_crossentropy, RMSprop), 02vansh (Conv1D,
# pooling, LSTM; sparse_categorical_crossentropy, Adam), vyomshm (two
# stacked LSTMs, tf.keras 2's hard_sigmoid gates; mean_squared_error, SGD
# with momentum), ansh2607 (Keras 3 GRUs with reset_after=true;
# mean_squared_error, Adam).
# Deterministic: running it twice gives byte-identical files.
#   cd tests/reference && npm ci && sh gen_real_fit.sh
set -e
cd "$(dirname "$0")"
OUT=../e2e/real_fit_cases
R3=../frontend/data/real3
RJ=../../../shared/real-json
rm -rf "$OUT"
node real_fit.js --no-kdc --quiet --write "$OUT" \
  "$R3/teriusbin__boston-house-price-predict__attention_model.json" \
  "$RJ/Ekuaappiah__Maternal-Health-Risk-Prediction-App__model.json" \
  "$R3/icemeteor__information-extraction__lstm_model.json" \
  "$R3/02vansh__Speech-Emotion-Recognition__cnn_lstm_model.json" \
  "$R3/vyomshm__DeepAnomaly__lstm_model.json" \
  "$R3/ansh2607__Solar-Power-Prediction__gru_model.json"
