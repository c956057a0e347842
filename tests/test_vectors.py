"""The exact scan and the embedder's checks give the same answers with numpy and without it.

numpy comes with ``keepstate[embed]``; without it (``pip install keepstate`` alone) the same code
runs in plain Python. Both paths are run here on the same inputs.
"""

from __future__ import annotations

import random
from array import array

import pytest

import keepstate
from keepstate import embedders, vectors
from keepstate.embedders import checked
from keepstate.vectors import nearest_documents, pack, similarities, unpack


def unit(values: list[float]) -> array[float]:
    norm = sum(v * v for v in values) ** 0.5
    return array("f", [v / norm for v in values])


@pytest.fixture(params=["numpy", "python"])
def numpy_or_not(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setattr(vectors, "HAS_NUMPY", False)
        monkeypatch.setattr(embedders, "HAS_NUMPY", False)
    return str(request.param)


def test_the_scan_ranks_documents_by_their_nearest_passage(numpy_or_not: str) -> None:
    rng = random.Random(3)
    rows: list[tuple[str, int, bytes]] = []
    for document in range(30):
        for _ in range(rng.randint(1, 4)):
            rows.append((f"doc{document:02d}", len(rows), pack(unit([rng.gauss(0, 1) for _ in range(16)]))))
    rows.append(("other-length", 99, pack(unit([1.0, 2.0]))))
    query = unit([rng.gauss(0, 1) for _ in range(16)])
    found = nearest_documents(query, rows, 5)
    best: dict[str, float] = {}
    for name, _, blob in rows:
        score = sum(a * b for a, b in zip(query, unpack(blob), strict=False)) if len(blob) == 64 else -1.0
        best[name] = max(best.get(name, -2.0), score)
    expected = sorted(best, key=lambda document: (-best[document], document))[:5]
    assert [document for document, _, _ in found] == expected
    assert [round(score, 5) for _, _, score in found] == [round(best[d], 5) for d in expected]
    assert similarities(query, []) == [] and nearest_documents(query, [], 5) == []


@pytest.mark.parametrize(
    "answer", [[[True, 1.0]], [["a", 1.0]], [[float("inf"), 1.0]], [[0.0, 0.0]], [[]], [[[1.0]]], [[1.0, None]], ["ab"]]
)
def test_a_vector_out_of_shape_is_refused_either_way(numpy_or_not: str, answer: object) -> None:
    with pytest.raises(keepstate.Unavailable):
        checked("test", answer, 1)


def test_a_good_vector_is_normalised_either_way(numpy_or_not: str) -> None:
    [vector] = checked("test", [[3, 4.0]], 1)
    assert list(vector) == pytest.approx([0.6, 0.8])
