"""The readings table: its format, and that a reading is in force only inside ``applied``."""

import re

from experiments import readings, runs
from experiments.readings import HEADER, READINGS, applied, main
from models.voting import presets


def test_quick_table_has_a_row_per_reading_and_noise(capsys):
    assert main(["--quick", "--only", "current", "ties-order", "--noise", "0.05"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("1 runs of 200 trials, 500 test instances, seed 0")
    assert lines[1].split() == " ".join(HEADER).split()
    paper = [line for line in lines if line.startswith("paper ")]
    measured = [line for line in lines[2:] if not line.startswith("paper ")]
    assert len(paper) == 1 and len(measured) == 2
    number = r"\d\.\d{5}"
    learner = rf"(A-|AR-)?(Balanced\([\d.]+\)|Perceptron|ALMA\([\d.]+\)) {number}"
    row = re.compile(
        rf"^(?P<name>\S+) +(?P<p>0\.05) +\d+\.\d +{number} +{learner} +{learner} +{learner}"
        rf" +Balanced\([\d.]+\) {number}$"
    )
    for line, name in zip(measured, ["current", "ties-order"], strict=True):
        match = row.match(line)
        assert match, line
        assert match["name"] == name


def test_list_names_every_reading(capsys):
    assert main(["--list"]) == 0
    names = [line.split(": ", 1)[0] for line in capsys.readouterr().out.splitlines()]
    assert names == list(READINGS)


def test_a_reading_is_in_force_only_inside_applied():
    reading = READINGS["balanced-init-2:1+alma-C=0.1+tie-update+u=50@p0"]
    before = (presets.basic_algorithms, runs.vr_combine_spec, runs.MajorityProblem)
    with applied(reading, 0.0):
        specs = runs.basic_algorithms()
        assert runs.vr_combine_spec()["max_updates"] == 50
    with applied(reading, 0.05):
        assert runs.vr_combine_spec()["max_updates"] == 5
    assert (presets.basic_algorithms, runs.vr_combine_spec, runs.MajorityProblem) == before
    kinds = {spec["learner"]["kind"]: spec for _, spec in specs}
    assert kinds["balanced-winnow"]["learner"]["init_pos"] == 2.0
    assert kinds["balanced-winnow"]["subexpert_z"] == "runner_up"
    assert kinds["perceptron"]["subexpert_z"] == "runner_up"
    assert kinds["alma"]["learner"]["C"] == 0.1 and "subexpert_z" not in kinds["alma"]
    assert readings.READINGS["current"].basic(specs[0][1]) == specs[0][1]
