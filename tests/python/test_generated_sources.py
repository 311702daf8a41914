"""Generated sources in the repository match their generators' output: a
checked-in file that drifted from its generator (an edit by hand, or a
generator changed without rerunning it) fails here."""
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# (generator, the file it writes), relative to the repository's root.
GENERATED = [("src/kernels/sm90/gen_wgmma_ops.py", "src/kernels/sm90/wgmma_ops.cuh")]


def test_generated_files_match_their_generators():
    for generator, output in GENERATED:
        fresh = subprocess.run([sys.executable, os.path.join(ROOT, generator)], check=True, capture_output=True,
                               text=True).stdout
        with open(os.path.join(ROOT, output)) as f:
            checked_in = f.read()
        assert fresh == checked_in, f"{output} differs from {generator}'s output: rerun `python3 {generator} > {output}`"
