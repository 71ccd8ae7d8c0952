"""``scripts/test.sh`` in a sandbox with stub setups and stub test environments: the README's command (no argument)
runs the fast set and the docs build and makes no engine environment; ``--rest`` runs every other tier and
``--all`` both, and CI (``.ci/run``) runs the README's command and then ``--rest``, nothing twice; every tier runs
and passes, the engine tiers' environments are made in the background while the slow tier runs, the tiers after it
run one after another (or in two lanes), the longest test files are handed out first, and a failed setup fails its
tier and the script."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    (tmp_path / "scripts" / "setup.sh").write_text(  # scripts/setup.sh [ENV]: every environment, one file
        't=${1:-main}\n'
        'case $t in main) echo main-setup; exit 0 ;; trl-*) echo "$t-setup"; exit 0 ;; esac\n'
        'echo "$t-setup-by-$PPID"; [ "${FAIL:-}" != "$t" ] || { echo "$t-setup-broke"; exit 3; }\n')
    (tmp_path / "scripts" / "docs.sh").write_text("echo docs-built\n")
    for tier in ("vllm", "verl", "core", "pyserini", "retriever"):
        py = tmp_path / f".venv-{tier}" / "bin" / "python"
        py.parent.mkdir(parents=True)
        py.write_text(f"#!/usr/bin/env bash\necho {tier}-tests-ran\n")
        py.chmod(0o755)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "activate").write_text(
        'python() { echo "main-tests-ran all=${RAG_CURRICULUM_ALL_TESTS:-unset} $*"; }\n')
    return tmp_path


def _run(sandbox: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    base = {k: v for k, v in os.environ.items()  # as the caller set
            if k not in ("TIERS", "SETUP_IN_BACKGROUND", "RAG_CURRICULUM_ALL_TESTS")}
    return subprocess.run(["bash", "scripts/test.sh", *args], cwd=sandbox, capture_output=True, text=True,
                          timeout=120, env={**base, **env})


ENGINES = ("vllm", "verl", "core", "pyserini", "retriever")


def _pytest_runs(stdout: str) -> list[str]:
    """The main environment's pytest command lines the run made (the stub prints each)."""
    return [line.removeprefix("main-tests-ran ") for line in stdout.splitlines() if line.startswith("main-tests-ran")]


def _markers(run: str) -> str | None:
    """The -m marker expression of a pytest command line the stub printed (after ``-m pytest``), or None."""
    m = re.search(r" -m (.+?)(?: --|$)", run.split("-m pytest", 1)[1])
    return m.group(1) if m else None


def test_the_readme_command_runs_the_fast_set_and_the_docs_and_makes_no_engine_environment(sandbox):
    """`bash scripts/test.sh`, what the README gives a newcomer: a plain `pytest` in .venv (the fast set, the slow
    tests left out: RAG_CURRICULUM_ALL_TESTS unset, no -m) and the docs build; no engine tier, no engine environment
    made, no warning about the disk the engine environments would need; and the last line says how to run the
    rest."""
    bin_dir = sandbox / "fake-bin"  # a small disk: nothing to say, since no engine environment is made
    _stub(bin_dir / "df", "echo 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
                          "echo '/dev/x 100000000 98000000 2097152 98% /'\n")
    import os

    r = _run(sandbox, JAVA="bash", RAG_CURRICULUM_ALL_TESTS="1", PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert r.returncode == 0, r.stderr
    assert "== tier fast (1 of 1): " in r.stdout and "tier fast: passed" in r.stdout and "docs-built" in r.stdout
    # what it runs and how long it takes, with the load that was measured at
    assert re.search(r"\d+ s measured on 2 cores at load [\d.]+", r.stdout.split("== tier fast")[1][:300]), r.stdout
    runs = _pytest_runs(r.stdout)
    assert len(runs) == 1 and runs[0].startswith("all=unset ") and _markers(runs[0]) is None, runs
    assert "-setup-by-" not in r.stdout + r.stderr and "-tests-ran" not in r.stdout.replace("main-tests-ran", "")
    assert "GB free" not in r.stderr, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("the fast set passed; every other tier")
    assert "bash scripts/test.sh --rest" in r.stdout.strip().splitlines()[-1]


def test_ci_runs_the_readme_command_then_the_rest_and_nothing_twice(sandbox):
    """.ci/run: the README's test command word for word, then --rest; together every tier once: the fast set, the
    slow tests (-m "slow and not learning", every test: RAG_CURRICULUM_ALL_TESTS=1), each engine tier, the docs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"^(bash scripts/test\.sh)\s+#", readme, re.M)
    assert command, "the README's test command"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    runs = [line for line in ci if line.startswith("bash ")]
    assert runs == [command.group(1), "bash scripts/test.sh --rest"], runs
    import os

    (sandbox / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", sandbox / ".ci" / "run")
    r = subprocess.run(["bash", ".ci/run"], cwd=sandbox, capture_output=True, text=True, timeout=240,
                       env={**{k: v for k, v in os.environ.items() if k != "TIERS"}, "JAVA": "bash"})
    assert r.returncode == 0, r.stderr
    announced = re.findall(r"^== tier (\w+) \(", r.stdout, re.M)
    assert announced == ["fast", "slow", *ENGINES], announced  # each once, the README's first
    pytest_runs = _pytest_runs(r.stdout)
    assert len(pytest_runs) == 2 and pytest_runs[0].startswith("all=unset ") and _markers(pytest_runs[0]) is None
    assert pytest_runs[1].startswith("all=1 ") and _markers(pytest_runs[1]) == "slow and not learning", pytest_runs
    assert r.stdout.count("docs-built") == 1
    for tier in ENGINES:
        assert r.stdout.count(f"{tier}-tests-ran") == 1


def test_every_tier_runs_with_its_environment_made_in_the_background(sandbox):
    r = _run(sandbox, "--all", JAVA="bash")  # (a command that exists: Java is there)
    assert r.returncode == 0, r.stderr
    tiers = ("fast", "slow", *ENGINES)
    for tier in tiers:
        assert f"tier {tier}: passed" in r.stdout
    for tier in ENGINES:
        assert f"{tier}-tests-ran" in r.stdout
    assert "docs-built" in r.stdout and len(_pytest_runs(r.stdout)) == 2
    for i, tier in enumerate(tiers, 1):  # each tier announced, with what and how long
        assert f"== tier {tier} ({i} of 7): " in r.stdout and "min" in r.stdout.split(f"== tier {tier}")[1][:200]
    for tier in ENGINES:  # its setup's output, shown before its tests (a lane prints its tiers whole)
        out = r.stdout.split(f"== tier {tier} (")[1]
        assert f"{tier}-setup-by-" in out.split(f"{tier}-tests-ran")[0], out
    assert "the fast set passed" not in r.stdout  # (said after the README's command alone)


def test_the_tiers_after_the_main_one_run_one_after_another_or_in_two_lanes(sandbox):
    """By default (LANES=1) the vllm tier's tests and the verl tier's run one after another; LANES=2 runs the verl
    tier's beside the vllm tier's."""
    vllm = sandbox / ".venv-vllm" / "bin" / "python"
    vllm.write_text("#!/usr/bin/env bash\ntouch vllm-running; sleep 5; rm vllm-running; echo vllm-tests-ran\n")
    verl = sandbox / ".venv-verl" / "bin" / "python"
    verl.write_text("#!/usr/bin/env bash\nsleep 2; [ ! -f vllm-running ] || echo verl-beside-vllm; echo verl-tests-ran\n")
    r = _run(sandbox, TIERS="main vllm verl")
    assert r.returncode == 0, r.stderr
    assert "verl-beside-vllm" not in r.stdout and "tier vllm: passed" in r.stdout and "tier verl: passed" in r.stdout
    r = _run(sandbox, TIERS="main vllm verl", LANES="2")
    assert r.returncode == 0, r.stderr
    assert "verl-beside-vllm" in r.stdout and "tier verl: passed" in r.stdout and "in 2 lanes at once" in r.stdout


@pytest.mark.parametrize("background", ["1", "0"])
def test_without_java_the_pyserini_tier_is_skipped_saying_why(sandbox, background):
    """No Java: pyserini cannot run, so its tier neither makes its environment nor runs; it says so, and the other
    tiers run and pass."""
    r = _run(sandbox, "--rest", JAVA="no-such-java-here", SETUP_IN_BACKGROUND=background)
    assert r.returncode == 0, r.stderr
    assert "tier pyserini: skipped: no Java here" in r.stdout
    assert "pyserini-setup-by-" not in r.stdout + r.stderr and "pyserini-tests-ran" not in r.stdout
    assert "tier pyserini: passed" not in r.stdout and "tier core: passed" in r.stdout


@pytest.mark.parametrize("background", ["1", "0"])
@pytest.mark.parametrize("broken", ["vllm", "core"])
@pytest.mark.parametrize("lanes", ["1", "2"])
def test_a_failed_setup_fails_its_tier_and_the_script(sandbox, background, broken, lanes):
    """A broken tier fails the script, naming it, and the other tiers still run and pass, one after another or in
    lanes."""
    r = _run(sandbox, "--rest", FAIL=broken, SETUP_IN_BACKGROUND=background, LANES=lanes, JAVA="bash")
    assert r.returncode != 0
    assert f"{broken}-setup-broke" in r.stdout + r.stderr
    assert f"tier {broken}: passed" not in r.stdout and f"{broken}-tests-ran" not in r.stdout
    assert f"tier {broken}: FAILED" in r.stdout and f"error: tiers failed: {broken}" in r.stderr
    for tier in {"slow", *ENGINES} - {broken}:
        assert f"tier {tier}: passed" in r.stdout, r.stdout


@pytest.mark.parametrize("which", ["newest", "oldest"])
def test_the_trl_tiers_are_opt_in_and_run_the_trainer_tests(sandbox, which):
    """``TIERS=trl-newest`` / ``trl-oldest``: its own setup (TRL moved to the newest or oldest release within the
    pin), then the tests that drive TRL's GRPOTrainer, every one of which exists; the default run leaves them out (a
    scheduled job runs them)."""
    py = sandbox / f".venv-trl-{which}" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/usr/bin/env bash\necho "trl-{which}-tests-ran $*"\n')
    py.chmod(0o755)
    assert f"trl-{which}" not in _run(sandbox).stdout and f"trl-{which}" not in _run(sandbox, "--all").stdout
    r = _run(sandbox, TIERS=f"trl-{which}")
    assert r.returncode == 0, r.stderr
    assert f"trl-{which}-setup" in r.stdout and f"tier trl-{which}: passed" in r.stdout
    assert f"the trainer's tests against the {which} TRL the pin allows in .venv-trl-{which}" in r.stdout
    ran = next(line for line in r.stdout.splitlines() if line.startswith(f"trl-{which}-tests-ran"))
    paths = [a for a in ran.split() if a.startswith("tests/")]
    assert len(paths) == 4 and "tests/train" in paths
    assert all((ROOT / p).exists() for p in paths), paths


def test_the_trl_setup_resolves_the_pins_newest_and_oldest(tmp_path):
    """scripts/setup.sh's spec for each end of the train extra's TRL pin (trl>=1.0,<2): the pin as it is
    (pip takes the newest), and its lower bound as a release (trl==1.0.*); an unknown environment is a usage error."""
    script = (ROOT / "scripts" / "setup.sh").read_text()
    spec = script[script.index("trl_spec() {"):]
    code = spec[spec.index("<<'PY'\n") + 6:spec.index("\nPY\n}")]
    got = {w: subprocess.run([sys.executable, "-", w], input=code, cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip() for w in ("newest", "oldest")}
    assert got == {"newest": "trl>=1.0,<2", "oldest": "trl==1.0.*"}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "trl-latest"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown environment 'trl-latest'" in r.stderr and "trl-oldest" in r.stderr


def test_each_tier_records_its_time_and_load_and_the_next_run_says_it(sandbox):
    """The announced times were 2.6x short of a 2-core run; a tier now ends with its time and the
    load it started at, recorded in .test-times, and the next run's announcement gives this machine's last run."""
    r = _run(sandbox, TIERS="main core")
    assert r.returncode == 0, r.stderr
    # the documented figure and the load it was measured at, said plainly
    assert re.search(r"\d+ s measured on 2 cores at load [\d.]+", r.stdout.split("== tier main")[1][:300]), r.stdout
    assert "last run here" not in r.stdout
    assert "tier core: passed in " in r.stdout and "load " in r.stdout.split("tier core: passed in ")[1][:80]
    records = (sandbox / ".test-times").read_text().splitlines()
    assert [line.split()[0] for line in records] == ["main", "core"]
    tier, seconds, load, _commit = records[0].split()
    assert seconds.isdigit() and float(load) >= 0
    r = _run(sandbox, TIERS="main core")
    assert f"last run here: {seconds} s at load {load}" in r.stdout.split("== tier main")[1][:400], r.stdout


def test_a_disk_too_small_for_the_environments_is_said_before_anything_installs(sandbox):
    """``df`` reporting 2 GB free: the script warns first, naming what the environments need, and still runs."""
    bin_dir = sandbox / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "df").write_text("#!/usr/bin/env bash\necho 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
                                "echo '/dev/x 100000000 98000000 2097152 98% /'\n")
    (bin_dir / "df").chmod(0o755)
    import os

    r = _run(sandbox, TIERS="core", PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert r.returncode == 0, r.stderr
    assert "warning: 2 GB free" in r.stderr and "about 11 GB" in r.stderr
    assert "tier core: passed" in r.stdout
    roomy = (bin_dir / "df").read_text().replace("2097152", "52428800")  # 50 GB free: nothing to say
    (bin_dir / "df").write_text(roomy)
    r = _run(sandbox, TIERS="core", PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert r.returncode == 0 and "GB free" not in r.stderr, r.stderr


def _setup_functions(tmp_path: Path) -> Path:
    """scripts/setup.sh's installer functions alone, sourced into a script of the test's (nothing installed)."""
    script = (ROOT / "scripts" / "setup.sh").read_text()
    body = script[script.index("UV=\nuv_args=()"):script.index("missing() {")]
    path = tmp_path / "installer.sh"
    path.write_text("set -euo pipefail\n" + body)
    return path


def _stub(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + text)
    path.chmod(0o755)
    return path


def test_pips_configuration_is_handed_to_uv(tmp_path):
    """uv reads none of pip's configuration: the index, the extra indexes and find-links that exist, the constraints,
    --no-index and the certificate are handed to it (a local folder that is not there is left out, as pip does)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    python = _stub(tmp_path / "bin" / "python3", f"""printf '%s\\n' \\
  ":env:.find-links='{wheels}'" "global.extra-index-url='file:///no/such/simple https://mirror.example/simple'" \\
  "global.constraint='/etc/c.txt'" "global.cert='/etc/ca.pem'" ":env:.no-index='1'" "global.index-url='https://idx/simple'"
""")
    _stub(tmp_path / "bin" / "uv", "exit 0\n")
    r = subprocess.run(["bash", "-c", f'. {_setup_functions(tmp_path)}; find_uv; echo "UV=$UV"; '
                        'printf "%s\\n" "${uv_args[@]}"; echo "cert=$SSL_CERT_FILE"'],
                       env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "PYTHON": str(python)},
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == f"UV={tmp_path / 'bin' / 'uv'}"
    args = " ".join(lines[1:lines.index(next(x for x in lines if x.startswith("cert=")))])
    assert args == ("--index-strategy unsafe-best-match --find-links " + str(wheels)
                    + " --extra-index-url https://mirror.example/simple --constraint /etc/c.txt --no-index"
                    + " --index-url https://idx/simple")
    assert "cert=/etc/ca.pem" in lines


def test_what_uv_cannot_install_is_installed_with_pip_saying_so(tmp_path):
    """A failing uv: the same install again with pip (uv's --upgrade-package NAME as pip's --upgrade), its lines
    said; INSTALLER=pip goes to pip at once."""
    _stub(tmp_path / "bin" / "uv", 'echo "uv: no solution found" >&2; exit 1\n')
    _stub(tmp_path / "bin" / "python3", "exit 0\n")  # `pip config list`: nothing configured
    py = _stub(tmp_path / "venv" / "bin" / "python", 'echo "$*" >> "$(dirname "$0")/pip-args"\n')
    code = f'. {_setup_functions(tmp_path)}; VENV=venv; PY={py}; install_packages --upgrade-package trl "trl>=1.0,<2"'
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "PYTHON": str(tmp_path / "bin" / "python3")}
    r = subprocess.run(["bash", "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "venv: uv pip install --upgrade-package trl trl>=1.0,<2" in r.stderr
    assert "uv could not install it" in r.stderr and "no solution found" in r.stderr
    assert (tmp_path / "venv" / "bin" / "pip-args").read_text() == "-m pip install -q --no-compile --upgrade trl>=1.0,<2\n"
    r = subprocess.run(["bash", "-c", code], env={**env, "INSTALLER": "pip"}, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "uv pip install" not in r.stderr and "venv: pip install --upgrade" in r.stderr


def test_an_index_url_asked_for_replaces_pips_configured_one_for_uv(tmp_path):
    """TORCH_INDEX_URL's --index-url with an index-url in pip's configuration: uv gets the one asked for only (it
    refuses two), as pip lets the command line override its configuration."""
    _stub(tmp_path / "bin" / "python3", "printf '%s\\n' \"global.index-url='https://mirror/simple'\"\n")
    _stub(tmp_path / "bin" / "uv", 'echo "$*" > uv-args\n')
    py = _stub(tmp_path / "venv" / "bin" / "python", "exit 0\n")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "PYTHON": str(tmp_path / "bin" / "python3")}
    for asked, want in ((["--index-url", "https://torch/cpu"], "--index-url https://torch/cpu"),
                        ([], "--index-url https://mirror/simple")):
        code = f'. {_setup_functions(tmp_path)}; VENV=venv; PY={py}; install_packages torch==2.13.0 {" ".join(asked)}'
        r = subprocess.run(["bash", "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        args = (tmp_path / "uv-args").read_text()
        assert args.count("--index-url") == 1 and want in args, args


def test_the_longest_test_files_are_handed_out_first():
    from types import SimpleNamespace

    from conftest import longest_files_first

    items = [SimpleNamespace(nodeid=n) for n in
             ["tests/a.py::x", "tests/a.py::y", "tests/b.py::x", "tests/c.py::x", "tests/c.py::y", "tests/d.py::x"]]
    longest_files_first(items, {"tests/c.py": 90, "tests/b.py": 5, "tests/gone.py": 500})
    assert [i.nodeid for i in items] == ["tests/c.py::x", "tests/c.py::y", "tests/b.py::x",
                                         "tests/a.py::x", "tests/a.py::y", "tests/d.py::x"]


def test_the_file_seconds_name_files_that_exist_and_test_sh_keeps_their_order():
    import json

    from conftest import FILE_SECONDS

    seconds = json.loads(FILE_SECONDS.read_text(encoding="utf-8"))["seconds"]
    assert seconds and all((ROOT / path).is_file() for path in seconds), "a renamed file: scripts/test_durations.py"


def test_every_tier_writes_bytecode_whatever_the_caller_set(sandbox):
    """The run's processes write each module's bytecode as they import it, also where the caller (CI) set
    PYTHONDONTWRITEBYTECODE: otherwise each process compiles torch's sources again."""
    py = sandbox / ".venv-core" / "bin" / "python"
    py.write_text('#!/usr/bin/env bash\necho "core-tests-ran ${PYTHONDONTWRITEBYTECODE:-writes-bytecode}"\n')
    r = _run(sandbox, TIERS="main core", PYTHONDONTWRITEBYTECODE="1")
    assert r.returncode == 0, r.stderr
    assert "core-tests-ran writes-bytecode" in r.stdout, r.stdout


@pytest.mark.parametrize("tier", ["main", "slow"])
def test_the_main_and_slow_tiers_keep_the_longest_first_order(sandbox, tier):
    r = _run(sandbox, TIERS=tier)
    ran = next(line for line in r.stdout.splitlines() if line.startswith("main-tests-ran"))
    assert "-n 2 --dist loadfile --no-loadscope-reorder" in ran, ran  # (xdist's own order: most tests first)
    assert "all=1 " in ran  # every test, the slow ones too
    r = _run(sandbox, TIERS=tier, WORKERS="1")
    assert "--dist" not in next(line for line in r.stdout.splitlines() if line.startswith("main-tests-ran"))


def test_each_files_seconds_are_summed_from_junit_xml(tmp_path):
    """scripts/test_durations.py: a module's tests, a class's and a doctest's, each summed under its file; a file
    under a second left out; a class name that is no file of the checkout left out."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from test_durations import file_seconds
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    xml = tmp_path / "run.xml"
    xml.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.test_readme" name="a" time="400.4"/>'
        '<testcase classname="tests.cli.test_conventions" name="b" time="2.5"/>'
        '<testcase classname="tests.cli.test_conventions.TestQuiet" name="c" time="1.0"/>'
        '<testcase classname="src.rag_curriculum.models" name="d" time="0.2"/>'
        '<testcase classname="tests.test_layout" name="e" time="0.3"/>'
        '<testcase classname="tests.no_such_file" name="f" time="9"/>'
        '<testcase classname="" name="tests.tier_vllm.test_vllm_cli" time="0.0"/>'
        '</testsuite></testsuites>', encoding="utf-8")
    assert file_seconds([str(xml)]) == {"tests/test_readme.py": 400, "tests/cli/test_conventions.py": 4}
