#!/usr/bin/env bash
# flash_sm90 forward variants: scripts/ab_device.sh flash_sm90 with --fwd-only.
# Usage there: COMPARE_ARGS="--quick --no-flex" bash scripts/sm90_ab_device.sh base try1
COMPARE_ARGS="--fwd-only ${COMPARE_ARGS:-}" exec bash "$(dirname "$0")/ab_device.sh" flash_sm90 "$@"
