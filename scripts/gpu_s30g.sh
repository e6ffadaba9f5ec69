#!/bin/bash
# GPU (session 30, H200 only): the targets of #20 name the H200; on any other card exit at once.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$name"
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0;; esac
bash scripts/gpu_s30e.sh
