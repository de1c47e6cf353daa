"""Input spaces: what a model's users send, and how it becomes a learner's instance.

An :class:`InputSpace` describes a model's input declaratively: attributes and/or
sub-experts, as in Mesterharm 1999, §3-4. It is built from, and exported to, a plain
JSON-able config; it reads JSON-like payloads, validates them with messages that name the
offending field, and encodes them as the canonical :class:`~models.core.instance.Attributes`
or :class:`~models.core.instance.Experts` a learner of ``input_kind`` "attributes" or
"experts" takes.

Config::

    {"labels": ["spam", "ham"],
     "attributes": {"n_features": 10}                  # dense list or {index: value}
                 | {"feature_names": ["a", "b"]}       # closed vocabulary
                 | {"hashing": {"n_features": 1024, "seed": 0}},   # open vocabulary
                   (+ "constant_attribute": false)     # one extra attribute, always 1
     "experts": {"expert_names": ["clf_a", "clf_b"],
                 "normalize": "raw" | "sum-to-one" | "rank" | "argmax" | [several],
                 "combinations": null | {"size": k, "by": "score" | "rank" | [both]},
                 "threshold_experts": false,           # k sub-experts, one per class
                 "split_classes": null | "all" | [label, ...],    # per-class split
                 "retired": [],                        # experts that vote no more
                 "endpoints": ..., "deadline_ms": ...}} # kept as they come, unread here

At least one of ``attributes`` and ``experts`` is given.

A space changes by :meth:`InputSpace.changed`: new experts, retired ones, new named
features, new labels. No coordinate is ever renumbered: the new ones come after all the
old, so an instance encoded before a change means the same after it. A retired expert
keeps its coordinates and its name, and a payload in which it votes is refused. The
config's ``generations`` lists the counts of experts, features and labels at creation
and after each change that added some; within each generation the new coordinates are
numbered in the order of the table below.

Payload: ``{"features": ..., "experts": {name: vote}}``. A missing (or null) ``features``
is the all-zero attribute vector (the constant attribute is still 1); a missing ``experts``
means every expert abstains. An expert missing from ``experts``, or whose vote is null or
``{}``, abstains (votes 0 for every class, whatever ``normalize`` says). A vote is
``{label: score}`` (missing labels score 0), a list of k scores in label order, or a bare
label (score 1 for it). ``normalize`` then maps each voting expert's k scores:
``sum-to-one`` divides by their sum (all-zero stays zero, negatives are an error),
``rank`` gives the label of rank r (r = number of strictly higher scores) the vote
(k-1-r)/(k-1), and ``argmax`` votes 1 for the top label (ties to the smallest class).
Value ranges are otherwise left to the learners. A list of q normalisations enters each
expert once per normalisation, and ``combinations`` adds subsets' averages
(:mod:`models.inputs.derived`).

Numbering. In form "attributes", features 0..d-1 come first, then the constant attribute
at index d. In form "experts", with n named experts, s split classes c_0 < ... < c_{s-1},
m = d (+1 with the constant) attributes, k classes, q normalisations and D derived
sub-experts (subsets' averages), the sub-experts are, in order:

==============================  ===========================  ========================
block                           sub-expert index             votes
==============================  ===========================  ========================
named expert i, normalisation j i*q + j                      its normalised k-vector
derived sub-expert t            n*q + t                      its subset's average
split piece (i, c_j)            n*q + D + i*s + j            x_i^{c_j} for c_j only
attribute a, class c            A + a*k + c                  x_a for class c only
threshold for class c           A + m*k + c                  1 for class c only
==============================  ===========================  ========================

with attribute offset A = n*(q+s) + D, so the constant attribute's k sub-experts are the
last attribute's, and the linear machine reads W[c][a] = w[A + a*k + c] (in a space that
never changed: a changed one numbers its later generations after these). A split piece
takes the first listed normalisation.
:meth:`InputSpace.describe_experts` names every index.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.core.instance import (
    Attributes,
    Experts,
    InvalidInstance,
    attributes_as_experts,
    concat_experts,
    threshold_experts,
)
from models.core.learner import UnknownLabel
from models.core.params import Bool, Integer, InvalidParameter, Labels
from models.inputs.batch import (
    NameTable,
    RawExperts,
    RawFeatures,
    Votes,
    dense_attributes,
    expert_votes,
    raw_expert_votes,
    raw_sparse_attribute,
    raw_sparse_attributes,
    raw_vote_row,
    raw_vote_rows,
    sparse_attributes,
)
from models.inputs.derived import (
    DERIVED_LIMIT,
    NORMALIZE,
    Combinations,
    Subsets,
    read_normalize,
)
from models.inputs.payload import (
    check_option,
    indexed_path,
    is_list,
    key_path,
    normalise_votes,
    read_names,
    read_numbers,
    read_section,
    read_votes,
    show,
)
from models.kernels.instances import vote_rows

__all__ = ["FORMS", "NORMALIZE", "InputSpace"]

FORMS = ("attributes", "experts")
Label = str | int

_HASH_CACHE_LIMIT = 1 << 16
# fewer payloads of votes than this are read one by one: reading them together has a
# fixed cost of a few dozen numpy calls, which only a few payloads repay
VOTES_TOGETHER = 3
_RAW = (RawExperts, RawFeatures)  # payloads that come as their JSON text
_DIGIT_KEYS = re.compile(r"[0-9]{1,18}(?:,[0-9]{1,18})*")
# members of the experts section this space keeps as they came without reading them: the
# service's own (where it asks deployed experts for their votes: app.service.fanout)
OPAQUE_EXPERTS = ("endpoints", "deadline_ms")


class InputSpace:
    """The declarative input of a model: labels, attributes and/or experts.

    Parameters
    ----------
    labels
        At least two distinct label names (strings or integers); class c is ``labels[c]``.
    attributes
        The ``attributes`` config section, or None (see the module docstring).
    experts
        The ``experts`` config section, or None.
    generations
        The counts of experts, features and labels after each change (see above).
    max_derived_experts
        The most derived sub-experts ``experts.combinations`` may add.

    Examples
    --------
    >>> space = InputSpace(["spam", "ham"], attributes={"n_features": 2},
    ...                    experts={"expert_names": ["clf"]})
    >>> x = space.encode({"features": [0.5, 0.0], "experts": {"clf": "ham"}}, "experts")
    >>> x.dense(space.size("experts"), 2).tolist()
    [[0.0, 1.0], [0.5, 0.0], [0.0, 0.5], [0.0, 0.0], [0.0, 0.0]]
    >>> space.describe_experts("experts")[:3]
    ['expert:clf', 'feature:0@label:spam', 'feature:0@label:ham']
    """

    labels: tuple[Label, ...]
    attributes: dict[str, Any] | None
    experts: dict[str, Any] | None

    def __init__(
        self,
        labels: Sequence[Label],
        attributes: Mapping[str, Any] | None = None,
        experts: Mapping[str, Any] | None = None,
        generations: Sequence[Sequence[int]] | None = None,
        max_derived_experts: int = DERIVED_LIMIT,
    ) -> None:
        expected = Labels().check(labels)
        if expected is None and len({str(v) for v in labels}) != len(labels):
            expected = "labels that stay distinct as JSON object keys (not both 1 and '1')"
        if expected is not None:
            raise InvalidParameter("labels", labels, expected)
        if attributes is None and experts is None:
            raise InvalidParameter("attributes", None, "an object when experts is null")
        self.labels = tuple(labels)
        self._k = len(self.labels)
        # what an absent section contributes: nothing
        self._mode, self._d, self._constant = "", 0, False
        self._names: dict[str, int] = {}
        self._retired: frozenset[str] = frozenset()
        self._expert_index: dict[str, int] = {}
        # the experts and labels as the compiled reader of JSON text matches them
        self._tables: tuple[NameTable, NameTable, bool] | None = None
        self._expert_names: tuple[str, ...] = ()
        self._split: tuple[int, ...] = ()
        self._normalize, self._threshold = "raw", False
        self._norms: tuple[str, ...] = ("raw",)
        self._combinations: Combinations | None = None
        self._class: dict[Any, int] = {v: c for c, v in enumerate(self.labels)}
        self._class.update({str(v): c for c, v in enumerate(self.labels) if isinstance(v, int)})
        # the labels as JSON object keys, in class order (None: a label has no such key)
        keys = tuple(v if isinstance(v, str) else str(v) for v in self.labels)
        exact = all(self._class.get(key) == c for c, key in enumerate(keys))
        self._keys_in_order = keys if exact and len(set(keys)) == self._k else None
        self.attributes = None if attributes is None else self._read_attributes(attributes)
        self.experts = None if experts is None else self._read_experts(experts)
        self._s = len(self._split)
        self._q = len(self._norms)
        n = len(self._expert_names)
        self._subsets: Subsets | None = None
        if self._combinations is not None:
            retired = [i for i, name in enumerate(self._expert_names) if name in self._retired]
            limit = min(max_derived_experts, DERIVED_LIMIT)
            self._subsets = Subsets(n, self._combinations, retired, limit)
        self._n_derived = 0 if self._subsets is None else len(self._subsets)
        # votes that enter as they come, one sub-expert each: the compiled readers' case
        self._plain = self._q == 1 and not self._n_derived
        self._attr_offset = n * (self._q + self._s) + self._n_derived
        self._m = 0 if attributes is None else self._d + int(self._constant)
        self._threshold_offset = self._attr_offset + self._m * self._k
        self._generations = self._read_generations(generations)
        self._layered = len(self._generations) > 1
        if self._layered:
            self._number_generations()

    def _read_generations(self, value: Any) -> list[list[int]]:
        """[experts, features, labels] at creation and after each change that added some,
        the last this space's own."""
        last = [len(self._expert_names), self._d, self._k]
        if value is None:
            return [last]
        expected = (
            f"a list of [experts, features, labels] counts, each at least the one before, "
            f"ending with {last}"
        )
        if not is_list(value) or not value or len(value) > 10_000:
            raise InvalidParameter("generations", value, expected)
        rows = []
        for row in value:
            if not is_list(row) or len(row) != 3:
                raise InvalidParameter("generations", value, expected)
            if any(type(v) is not int or v < 0 for v in row):
                raise InvalidParameter("generations", value, expected)
            rows.append(list(row))
        growing = all(
            all(a <= b for a, b in zip(p, q, strict=True)) and p != q
            for p, q in itertools.pairwise(rows)
        )
        first = rows[0]
        # split classes listed by name were labels from the start
        listed_split = bool(self._split) and (self.experts or {}).get("split_classes") != "all"
        fixed_d = self._mode != "feature_names" and any(r[1] != self._d for r in rows)
        if (
            rows[-1] != last
            or not growing
            or fixed_d
            or first[2] < 2
            or (self.experts is not None and first[0] < 1)
            or (self._mode == "feature_names" and first[1] < 1)
            or (listed_split and max(self._split) >= first[2])
        ):
            raise InvalidParameter("generations", value, expected)
        return rows

    def _number_generations(self) -> None:
        """The coordinate of every attribute and sub-expert when the space grew in
        generations: each generation's new ones after all the earlier ones, in the
        order of the module's table."""
        n, d, k, s, m = len(self._expert_names), self._d, self._k, self._s, self._m
        q = self._q
        split_cls = np.array(self._split, dtype=np.int64)
        attr = np.full(m, -1, dtype=np.int64)
        named = np.full((n, q), -1, dtype=np.int64)
        derived = np.full(self._n_derived, -1, dtype=np.int64)
        split = np.full((n, s), -1, dtype=np.int64)
        cross = np.full((m, k), -1, dtype=np.int64)
        thresholds = np.full(k, -1, dtype=np.int64)
        next_a = next_x = 0
        pn = pd = pk = 0
        for g, (gn, gd, gk) in enumerate(self._generations):
            rows = np.arange(gd, dtype=np.int64)  # this generation's attribute rows
            if self._constant:
                rows = np.append(rows, d)  # the constant, always last
            new_row = (rows >= pd) & ((rows < d) | (g == 0))
            fresh = rows[new_row]
            attr[fresh] = next_a + np.arange(fresh.size)
            next_a += fresh.size
            fresh = np.arange(pn, gn)
            named[fresh] = (next_x + np.arange(fresh.size * q)).reshape(-1, q)
            next_x += fresh.size * q
            if self._subsets is not None:  # the subsets that came with this generation
                newest = self._subsets.newest
                fresh = np.flatnonzero((newest >= pn) & (newest < gn))
                derived[fresh] = next_x + np.arange(fresh.size)
                next_x += fresh.size
            if s:
                live = split_cls < gk
                mask = ((np.arange(gn) >= pn)[:, None] | (split_cls >= pk)[None, :]) & live
                i, j = np.nonzero(mask)
                split[i, j] = next_x + np.arange(i.size)
                next_x += i.size
            if m:
                mask = new_row[:, None] | (np.arange(gk) >= pk)[None, :]
                r, c = np.nonzero(mask)
                cross[rows[r], c] = next_x + np.arange(r.size)
                next_x += r.size
            if self._threshold:
                fresh = np.arange(pk, gk)
                thresholds[fresh] = next_x + np.arange(fresh.size)
                next_x += fresh.size
            pn, pd, pk = gn, gd, gk
        self._attr_at, self._named_at, self._split_at = attr, named, split
        self._derived_at = derived
        self._cross_at, self._threshold_at = cross, thresholds

    def _read_attributes(self, section: Any) -> dict[str, Any]:
        keys = ("n_features", "feature_names", "hashing", "constant_attribute")
        section = read_section(section, "attributes", keys)
        modes = [key for key in keys[:3] if key in section]
        if len(modes) != 1:
            raise InvalidParameter(
                "attributes", dict(section), "exactly one of n_features, feature_names, hashing"
            )
        self._mode = modes[0]
        self._constant = check_option(
            section.get("constant_attribute", False), "attributes.constant_attribute", Bool()
        )
        if self._mode == "n_features":
            self._d = check_option(section["n_features"], "attributes.n_features", Integer(low=1))
            out: dict[str, Any] = {"n_features": self._d}
        elif self._mode == "feature_names":
            names = read_names(section["feature_names"], "attributes.feature_names")
            self._names = {name: i for i, name in enumerate(names)}
            self._d = len(names)
            out = {"feature_names": names}
        else:
            hashing = read_section(section["hashing"], "attributes.hashing", ("n_features", "seed"))
            self._d = check_option(
                hashing.get("n_features"), "attributes.hashing.n_features", Integer(low=1)
            )
            seed = check_option(
                hashing.get("seed", 0), "attributes.hashing.seed", Integer(0, 2**64 - 1)
            )
            self._hash_key = seed.to_bytes(8, "little")
            self._hash_cache: dict[str, int] = {}
            out = {"hashing": {"n_features": self._d, "seed": seed}}
        out["constant_attribute"] = self._constant
        return out

    def _read_experts(self, section: Any) -> dict[str, Any]:
        keys = (
            "expert_names",
            "normalize",
            "combinations",
            "threshold_experts",
            "split_classes",
            "retired",
            *OPAQUE_EXPERTS,
        )
        section = read_section(section, "experts", keys)
        if "expert_names" not in section:
            raise InvalidParameter("experts.expert_names", None, "a list of expert names")
        names = read_names(section["expert_names"], "experts.expert_names")
        self._expert_names = tuple(names)
        retired = section.get("retired") or []
        if retired:
            retired = read_names(retired, "experts.retired")
            for j, name in enumerate(retired):
                if name not in names:
                    raise InvalidParameter(f"experts.retired[{j}]", name, "one of expert_names")
        self._retired = frozenset(retired)
        # a retired expert's name is not a voter's: its votes are refused
        self._expert_index = {name: i for i, name in enumerate(names) if name not in retired}
        self._norms, normalize = read_normalize(section.get("normalize", "raw"))
        self._normalize = self._norms[0]
        if section.get("combinations") is not None:
            self._combinations = Combinations.read(section["combinations"])
        self._threshold = check_option(
            section.get("threshold_experts", False), "experts.threshold_experts", Bool()
        )
        split = section.get("split_classes")
        if split == "all":
            self._split = tuple(range(self._k))
        elif split is None:
            self._split = ()
        else:
            if not is_list(split):
                raise InvalidParameter(
                    "experts.split_classes", split, "'all', null or a list of labels"
                )
            classes = []
            for j, label in enumerate(split):
                c = self._class_key(label)
                if c is None or c in classes:
                    raise InvalidParameter(
                        f"experts.split_classes[{j}]", label, "a label not already listed"
                    )
                classes.append(c)
            self._split = tuple(sorted(classes))
            split = [self.labels[c] for c in self._split] or None
        out = {
            "expert_names": names,
            "normalize": normalize,
            "threshold_experts": self._threshold,
            "split_classes": split,
        }
        if self._combinations is not None:
            out["combinations"] = self._combinations.config()
        if retired:
            out["retired"] = list(retired)
        for key in OPAQUE_EXPERTS:  # kept as they came, for the service to read
            if section.get(key) is not None:
                out[key] = copy.deepcopy(section[key])
        return out

    # -- config --------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> InputSpace:
        """Build from a config ``{"labels": [...], "attributes": ..., "experts": ...}``."""
        config = read_section(config, "input", ("labels", "attributes", "experts", "generations"))
        if "labels" not in config:
            raise InvalidParameter("labels", None, "a list of at least 2 labels")
        return cls(
            config["labels"],
            config.get("attributes"),
            config.get("experts"),
            config.get("generations"),
        )

    def config(self) -> dict[str, Any]:
        """The JSON-able config that :meth:`from_config` turns back into this space."""
        out: dict[str, Any] = {"labels": list(self.labels)}
        if self.attributes is not None:
            out["attributes"] = copy.deepcopy(self.attributes)
        if self.experts is not None:
            out["experts"] = copy.deepcopy(self.experts)
        if self._layered:
            out["generations"] = copy.deepcopy(self._generations)
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InputSpace) and self.config() == other.config()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"InputSpace.from_config({self.config()!r})"

    # -- changes ---------------------------------------------------------------------

    @property
    def expert_names(self) -> tuple[str, ...]:
        """Every named expert, the retired ones included, in index order."""
        return self._expert_names

    @property
    def retired(self) -> frozenset[str]:
        return self._retired

    def changed(self, change: Mapping[str, Any]) -> InputSpace:
        """This space after ``change``: ``{"experts": {"add": [...], "retire": [...]},
        "features": {"add": [...]}, "labels": {"add": [...]}}``, any part of it.

        New experts and features come after the old ones, new labels after the old
        labels. A name once used (retired included) cannot name a new expert. Raises
        :class:`InvalidParameter` naming the offending field.
        """
        change = read_section(change, "change", ("experts", "features", "labels"))
        config = self.config()
        if "experts" in change:
            part = read_section(change["experts"], "experts", ("add", "retire", "endpoints"))
            if part.get("add") is None and part.get("retire") is None:
                raise InvalidParameter("experts", dict(part), "names to add and/or retire")
            if self.experts is None:
                raise InvalidParameter("experts", part, "nothing: this model has no experts")
            experts = config["experts"]
            names = list(experts["expert_names"])
            retired = list(experts.get("retired") or [])
            for j, name in enumerate(_listed(part.get("add"), "experts.add")):
                if name in names:
                    why = "a retired name" if name in retired else "an expert already"
                    raise InvalidParameter(
                        f"experts.add[{j}]", name, f"a new name ({name!r} is {why})"
                    )
                names.append(name)
            for j, name in enumerate(_listed(part.get("retire"), "experts.retire")):
                if name not in self._expert_index:
                    why = "retired already" if name in retired else "not an expert"
                    raise InvalidParameter(f"experts.retire[{j}]", name, f"a voting expert ({why})")
                retired.append(name)
            experts["expert_names"] = names
            experts["retired"] = retired
            endpoints = part.get("endpoints")
            if endpoints is not None:  # the new experts' own, kept as they come
                added = names[len(self.expert_names) :]
                if not isinstance(endpoints, Mapping) or not endpoints:
                    raise InvalidParameter("experts.endpoints", endpoints, "an object")
                for name in endpoints:
                    if name not in added:
                        raise InvalidParameter(
                            f"experts.endpoints.{name}", name, "one of the experts added"
                        )
                old = experts.get("endpoints") or {}
                experts["endpoints"] = {**old, **copy.deepcopy(dict(endpoints))}
        if "features" in change:
            part = read_section(change["features"], "features", ("add",))
            if self._mode != "feature_names":
                raise InvalidParameter(
                    "features", part, "nothing: only a model with named features takes new ones"
                )
            features = list(config["attributes"]["feature_names"])
            for j, name in enumerate(_listed(part.get("add"), "features.add")):
                if name in features:
                    raise InvalidParameter(f"features.add[{j}]", name, "a new feature name")
                features.append(name)
            config["attributes"]["feature_names"] = features
        if "labels" in change:
            part = read_section(change["labels"], "labels", ("add",))
            add = part.get("add")
            if not is_list(add) or not add:
                raise InvalidParameter("labels.add", add, "a non-empty list of labels")
            for j, label in enumerate(add):
                if self._class_key(label) is not None or str(label) in map(str, self.labels):
                    raise InvalidParameter(f"labels.add[{j}]", label, "a new label")
            config["labels"] = [*self.labels, *add]
        experts = config.get("experts") or {}
        attributes = config.get("attributes") or {}
        counts = [
            len(experts.get("expert_names", ())),
            len(attributes["feature_names"]) if "feature_names" in attributes else self._d,
            len(config["labels"]),
        ]
        if counts != self._generations[-1]:
            config["generations"] = [*self._generations, counts]
        try:
            return InputSpace.from_config(config)
        except InvalidParameter as exc:
            if exc.name.startswith("labels"):
                add = change["labels"].get("add")
                raise InvalidParameter("labels.add", add, exc.expected) from None
            raise

    # -- labels, forms and sizes ----------------------------------------------------

    @property
    def n_classes(self) -> int:
        return self._k

    def _class_key(self, label: Any) -> int | None:
        if isinstance(label, bool) or not isinstance(label, str | int | np.integer):
            return None
        return self._class.get(label)

    def classes_of(self, labels: Sequence[Any]) -> list[int | None]:
        """The class index of each of ``labels`` as :meth:`class_of` finds it, None for
        one it refuses (ask it, which says why)."""
        known = self._class
        return [known.get(y) if type(y) is int or type(y) is str else None for y in labels]

    def class_of(self, label: Any) -> int:
        """The class index of ``label`` (an integer label may also come as its string)."""
        c = self._class_key(label)
        if c is None:
            raise UnknownLabel(f"unknown label {label!r}: expected one of {list(self.labels)}")
        return c

    @property
    def forms(self) -> tuple[str, ...]:
        """The learner forms this space encodes to ("attributes" only without experts)."""
        return FORMS if self.experts is None else ("experts",)

    def _check_form(self, form: str) -> None:
        if form not in self.forms:
            why = " (this input has experts)" if form == "attributes" else ""
            raise InvalidParameter("form", form, " or ".join(map(repr, self.forms)) + why)

    def size(self, form: str) -> int:
        """The learner dimension: attributes for "attributes", sub-experts for "experts"."""
        self._check_form(form)
        if form == "attributes":
            return self._m
        return self._threshold_offset + (self._k if self._threshold else 0)

    def feature_index(self, key: Any) -> int:
        """The attribute index of a feature key (an index, a name or a hashed name)."""
        if self.attributes is None:
            raise InvalidInstance("features: this input has no attributes")
        if self._mode == "n_features":
            if (isinstance(key, str) and key.isascii() and key.isdigit()) or (
                isinstance(key, int | np.integer) and not isinstance(key, bool)
            ):
                i = int(key)
            else:
                raise InvalidInstance(
                    f"{key_path('features', key)}: expected a feature index "
                    "(an integer or a string of digits)"
                )
            if not 0 <= i < self._d:
                raise InvalidInstance(
                    f"features[{i}]: index out of range: expected 0 to {self._d - 1}"
                )
            return i
        if not isinstance(key, str):
            raise InvalidInstance(f"{key_path('features', key)}: expected a feature name")
        if self._mode == "feature_names":
            i = self._names.get(key, -1)
            if i < 0:
                raise InvalidInstance(f"features.{key}: unknown feature name")
            return i
        return self._hash(key)

    def _digit_keys(self, keys: list[Any]) -> np.ndarray | None:
        """The indices of keys that are all strings of digits within range (the common
        sparse form), checked at once; None when feature_index must look at each."""
        if self._mode != "n_features" or not keys:
            return None
        try:
            joined = ",".join(keys)
        except TypeError:
            return None
        if len(joined) > 20 * len(keys) or not _DIGIT_KEYS.fullmatch(joined):
            return None
        if joined.count(",") != len(keys) - 1:  # a key with a comma: not an index
            return None
        idx = np.array(list(map(int, keys)), dtype=np.int64)
        return idx if idx.max() < self._d else None

    def _hashed(self, keys: list[Any]) -> Mapping[str, int]:
        """The table of hashed names, holding each of ``keys`` that is a string (unless
        there are more than it keeps): the names seen before are looked up together, and
        only the new ones hashed."""
        cache, names = self._hash_cache, set(keys)
        new = names - (cache.keys() & names)  # each a lookup of one of names, not of cache
        if len(cache) + len(new) > _HASH_CACHE_LIMIT:
            cache.clear()
            new = names
        for name in new:
            if isinstance(name, str):
                self._hash(name)
        return cache

    def _hash(self, name: str) -> int:
        """A stable hash (keyed BLAKE2b, 64 bits) of ``name`` modulo the table size."""
        i = self._hash_cache.get(name)
        if i is None:
            raw = name.encode("utf-8", "surrogatepass")
            digest = hashlib.blake2b(raw, digest_size=8, key=self._hash_key).digest()
            i = int.from_bytes(digest, "little") % self._d
            if len(self._hash_cache) >= _HASH_CACHE_LIMIT:
                self._hash_cache.clear()
            self._hash_cache[name] = i
        return i

    def expert_slots(self, name: str) -> list[int]:
        """The "experts"-form sub-expert indices of a named expert: itself (once per
        normalisation), then its pieces."""
        names = self._expert_names
        i = names.index(name) if name in names else -1
        if i < 0:
            raise InvalidInstance(f"experts.{name}: unknown expert")
        if self._layered:
            return [*map(int, self._named_at[i]), *map(int, self._split_at[i])]
        n, q = len(self._expert_names), self._q
        split = n * q + self._n_derived + i * self._s
        return [i * q + j for j in range(q)] + [split + j for j in range(self._s)]

    @property
    def n_derived(self) -> int:
        """The number of derived sub-experts (subsets' averages)."""
        return self._n_derived

    def describe_experts(self, form: str) -> list[str]:
        """A name for every coordinate of the learner in ``form`` (see the numbering)."""
        self._check_form(form)
        if self.attributes is None:
            attrs: list[str] = []
        elif self._mode == "feature_names":
            attrs = [f"feature:{name}" for name in self.attributes["feature_names"]]
        else:
            unit = "feature" if self._mode == "n_features" else "hash"
            attrs = [f"{unit}:{i}" for i in range(self._d)]
        attrs += ["constant"] if self._constant else []
        if form == "attributes":
            return _placed(attrs, self._attr_at) if self._layered else attrs
        labels = [f"@label:{label}" for label in self.labels]
        names = self._expert_names
        if self._q == 1:
            out = [f"expert:{name}" for name in names]
        else:
            out = [f"expert:{name}/{norm}" for name in names for norm in self._norms]
        if self._subsets is not None:
            out += [f"expert:{name}" for name in self._subsets.names(names)]
        out += [f"expert:{name}{labels[c]}" for name in names for c in self._split]
        out += [a + lab for a in attrs for lab in labels]
        out += [f"threshold{lab}" for lab in labels] if self._threshold else []
        if self._layered:  # the same names, each at its own coordinate
            at = [self._named_at, self._derived_at, self._split_at, self._cross_at]
            at += [self._threshold_at] if self._threshold else []
            return _placed(out, np.concatenate([a.ravel() for a in at]))
        return out

    # -- encoding --------------------------------------------------------------------

    def encode(self, payload: Any, form: str) -> Attributes | Experts:
        """Validate ``payload`` and encode it for a learner of ``input_kind`` ``form``."""
        self._check_form(form)
        if not isinstance(payload, Mapping):
            raise InvalidInstance(
                f"payload is {show(payload)}: expected an object with features and/or experts"
            )
        for key in payload:
            if key not in ("features", "experts"):
                raise InvalidInstance(
                    f"{key_path('payload', key)}: unknown key: expected features or experts"
                )
        features, votes = payload.get("features"), payload.get("experts")
        if features is not None and self.attributes is None:
            raise InvalidInstance("features: this input has no attributes, only experts")
        if votes is not None and self.experts is None:
            raise InvalidInstance("experts: this input has no experts, only attributes")
        x = None if self.attributes is None else self._encode_attributes(features)
        if form == "attributes":
            assert x is not None
            return self._placed_attributes(x) if self._layered else x
        if self._layered:
            return self._placed_experts(x, votes)
        parts = []
        if self.experts is not None:
            parts.append(self._encode_votes(votes))
        if x is not None:
            parts.append(attributes_as_experts(x, self._k, offset=self._attr_offset))
        if self._threshold:
            parts.append(threshold_experts(self._k, offset=self._threshold_offset))
        return concat_experts(parts)

    def _placed_attributes(self, x: Attributes) -> Attributes:
        idx = self._attr_at[x.indices]
        order = np.argsort(idx, kind="stable")
        return Attributes._trusted(idx[order], x.values[order])

    def _placed_experts(self, x: Attributes | None, votes: Any) -> Experts:
        """An instance of a space that grew: each block at its generations' coordinates."""
        e, c, v = [], [], []
        if self.experts is not None:
            got = self._encode_votes(votes)
            e.append(got.expert)
            c.append(got.cls)
            v.append(got.value)
        if x is not None:
            k = self._k
            e.append(self._cross_at[x.indices].ravel())
            c.append(np.tile(np.arange(k, dtype=np.int64), x.indices.size))
            v.append(np.repeat(x.values, k))
        if self._threshold:
            e.append(self._threshold_at)
            c.append(np.arange(self._k, dtype=np.int64))
            v.append(np.ones(self._k))
        ex, cl, va = np.concatenate(e), np.concatenate(c), np.concatenate(v)
        order = np.lexsort((cl, ex))
        return Experts._trusted(ex[order], cl[order], va[order], size=self.size("experts"))

    def encode_many(self, payloads: Sequence[Any], form: str) -> list[Attributes | Experts]:
        """Encode each payload; an error names the payload's position."""
        out = []
        for t, payload in enumerate(payloads):
            try:
                out.append(self.encode(payload, form))
            except InvalidInstance as e:
                raise type(e)(f"payload {t}: {e}") from None
        return out

    def encode_each(
        self, payloads: Sequence[Any], form: str
    ) -> list[Attributes | Experts | InvalidInstance | InvalidParameter]:
        """:meth:`encode` of each payload, or the error it raises, in order.

        Payloads ``{"features": {"<index>": value, ...}}`` of an ``n_features`` space
        encoded to form "attributes" are encoded together
        (:func:`~models.inputs.batch.sparse_attributes`), to the same instances, and so
        are payloads ``{"experts": {...}}`` of a space of experts alone
        (:func:`~models.inputs.batch.expert_votes`). Either may come as its JSON text
        (:class:`~models.inputs.batch.RawFeatures`,
        :class:`~models.inputs.batch.RawExperts`), read straight from it where it can be;
        a lone payload so by a compiled call of its own (:meth:`_raw_one`), which hands
        back only its own arrays.
        """
        self._check_form(form)
        if len(payloads) == 1:  # a lone request's: read by a call of its own
            one = self._raw_one(payloads[0], form)
            if one is not None:
                return [one]
        fast: dict[int, Attributes | Experts] = {}
        raw = [t for t, p in enumerate(payloads) if type(p) is RawExperts]
        if raw:
            votes = self._raw_votes_each([payloads[t] for t in raw]) if form == "experts" else None
            if votes is not None:
                fast = dict(zip(raw, votes, strict=True))
        raw = [t for t, p in enumerate(payloads) if type(p) is RawFeatures]
        if raw and form == "attributes" and self._mode == "n_features":
            got = raw_sparse_attributes([payloads[t] for t in raw], self._d, self._constant)
            for t, x in zip(raw, got, strict=True):
                if x is not None:
                    fast[t] = self._placed_attributes(x) if self._layered else x
        if any(type(p) in _RAW and t not in fast for t, p in enumerate(payloads)):
            # refused: read as documents, which names any fault
            payloads = [
                p.document() if type(p) in _RAW and t not in fast else p
                for t, p in enumerate(payloads)
            ]
        if form == "attributes" and self.attributes is not None:
            features = [
                (t, p["features"])
                for t, p in enumerate(payloads)
                if type(p) is dict and len(p) == 1 and "features" in p
            ]
            mapped = [(t, f) for t, f in features if type(f) is dict]
            listed = [(t, f) for t, f in features if type(f) is list]
            names: Mapping[str, int] | None = None
            if self._mode == "feature_names":
                names = self._names
            elif self._mode == "hashing":  # a list is not a hashed form: encode says so
                keys = list(itertools.chain.from_iterable(f for _, f in mapped))
                listed, names = [], self._hashed(keys)
            hashed = self._mode == "hashing"
            got = [
                *sparse_attributes([f for _, f in mapped], self._d, self._constant, names, hashed),
                *dense_attributes([f for _, f in listed], self._d, self._constant),
            ]
            for (t, _), x in zip([*mapped, *listed], got, strict=True):
                if x is not None:
                    fast[t] = self._placed_attributes(x) if self._layered else x
        elif form == "experts" and self.attributes is None and not self._threshold:
            rows = [
                t
                for t, p in enumerate(payloads)
                if type(p) is dict and len(p) == 1 and type(p.get("experts")) is dict
            ]
            rows = [t for t in rows if t not in fast]
            if len(rows) >= VOTES_TOGETHER:
                votes = self._votes_each([payloads[t]["experts"] for t in rows])
                fast.update(zip(rows, votes or (), strict=False))
        out: list[Attributes | Experts | InvalidInstance | InvalidParameter] = []
        for t, payload in enumerate(payloads):
            done = fast.get(t)
            if done is not None:
                out.append(done)
                continue
            try:
                out.append(self.encode(payload, form))
            except (InvalidInstance, InvalidParameter) as e:
                out.append(e)
        return out

    def _votes_each(self, votes: list[dict[Any, Any]]) -> list[Experts] | None:
        """The instance of each ``experts`` object as :meth:`_encode_votes` gives it,
        worked out together; None when one is not plainly well formed."""
        got = expert_votes(votes, self._expert_index, self._class, self._keys_in_order, self._k)
        return None if got is None else self._voted(got, len(votes))

    def _raw_one(self, payload: Any, form: str) -> Attributes | Experts | None:
        """The instance of one payload given as its text, read by the compiled call for
        one (:func:`~models.inputs.batch.raw_vote_row`,
        :func:`~models.inputs.batch.raw_sparse_attribute`) as :meth:`encode_each` reads
        it among many; None when that call does not apply or refuses the text (then it is
        read as one of many, which names any fault)."""
        if type(payload) is RawFeatures:
            if form != "attributes" or self._mode != "n_features":
                return None
            x = raw_sparse_attribute(payload, self._d, self._constant)
            return None if x is None else self._placed_attributes(x) if self._layered else x
        if (
            type(payload) is not RawExperts
            or form != "experts"
            or self._normalize != "raw"
            or not self._plain
            or self._layered
            or self._s
            or not self._raw_votes_read()
        ):
            return None
        assert self._tables is not None
        return raw_vote_row(payload, *self._tables, self._k)

    def _raw_votes_read(self) -> bool:
        """Whether votes are read from their text (:meth:`_raw_votes_each`): experts
        alone, no threshold experts, labels with keys; sets the name tables it reads by."""
        if self.attributes is not None or self._threshold or self._keys_in_order is None:
            return False
        if self._tables is None:
            self._tables = (
                NameTable.of(self._expert_index),
                NameTable.of({key: c for c, key in enumerate(self._keys_in_order)}),
                all(type(v) is int for v in self.labels),
            )
        return True

    def _raw_votes_each(self, items: list[RawExperts]) -> list[Experts] | None:
        """The instance of each payload ``items`` as :meth:`_encode_votes` gives it, read
        from its text together; None when the text is not read so (then parse it)."""
        if not self._raw_votes_read():
            return None
        assert self._tables is not None
        if self._normalize == "raw" and self._plain and not self._layered and not self._s:
            rows = raw_vote_rows(items, *self._tables, self._k)
            return None if rows is None else Experts.rows(*rows)
        got = raw_expert_votes(items, *self._tables, self._k)
        return None if got is None else self._voted(got, len(items))

    def _voted(self, got: Votes, n: int) -> list[Experts] | None:
        """The instances of ``n`` payloads whose votes are ``got``; None when one is not
        plainly well formed."""
        try:
            paths = [("experts", False)] * len(got.row)  # (named only by an error)
            scores = self._normalised(got.scores, paths)
        except InvalidInstance:
            return None
        if self._plain and not self._layered and not self._s:  # the common case, compiled
            return Experts.rows(*vote_rows(got.row, got.expert, scores[self._normalize], n))
        e, cls, v, voted = self._triples(got.expert, scores, got.row)
        return _expert_rows(
            n,
            np.concatenate([got.row[r] for r in voted]),
            np.concatenate(e),
            np.concatenate(cls),
            np.concatenate(v),
            self.size("experts") if self._layered else 0,
        )

    def _encode_attributes(self, features: Any) -> Attributes:
        d = self._d
        if is_list(features) and self._mode != "hashing":
            if len(features) != d:
                raise InvalidInstance(f"features has {len(features)} values: expected {d}")
            arr = read_numbers(features, indexed_path("features"))
            if self._constant:
                arr = np.append(arr, 1.0)
            return Attributes.from_dense(arr)
        if features is None:
            features = {}
        elif not isinstance(features, Mapping):
            expected = (
                "an object {index: value}"
                if self._mode == "n_features"
                else ("an object {feature name: value}")
            )
            if self._mode != "hashing":
                expected = f"a list of {d} numbers or {expected}"
            raise InvalidInstance(f"features is {show(features)}: expected {expected}")
        keys = list(features)
        idx = self._digit_keys(keys)
        if self._mode == "hashing" and keys:
            table = self._hashed(keys)
            got = np.fromiter(map(table.get, keys, itertools.repeat(-1)), np.int64, len(keys))
            idx = got if int(got.min()) >= 0 else None
        if idx is None:
            idx = np.fromiter(map(self.feature_index, keys), dtype=np.int64, count=len(keys))
        val = read_numbers(list(features.values()), lambda j: key_path("features", keys[j]))
        if idx.size > 1:  # sorted indices: attributes_as_experts needs them in order
            order = np.argsort(idx, kind="stable")
            idx, val = idx[order], val[order]
            repeated = idx[1:] == idx[:-1]
            if repeated.any():
                if self._mode != "hashing":
                    i = int(idx[np.flatnonzero(repeated)[0]])
                    raise InvalidInstance(f"features[{i}] is given twice")
                idx, first = np.unique(idx, return_index=True)
                with np.errstate(over="ignore"):  # an overflow is reported just below
                    val = np.add.reduceat(val, first)  # hash collisions add up
                if not np.isfinite(val).all():
                    j = int(np.flatnonzero(~np.isfinite(val))[0])
                    raise InvalidInstance(
                        f"features hashed to index {int(idx[j])} sum to {float(val[j])!r}: "
                        "expected a finite number"
                    )
        if self._constant:
            idx, val = np.append(idx, d), np.append(val, 1.0)
        # indices checked by feature_index, sorted and distinct above; values finite
        return Attributes._trusted(idx, val)

    def _encode_votes(self, votes: Any) -> Experts:
        try:
            rows, paths, scores = read_votes(
                votes,
                self._expert_index,
                self._class_key,
                self.labels,
                self._class,
                self._keys_in_order,
            )
        except InvalidInstance:
            if self._retired and isinstance(votes, Mapping):
                for name in votes:
                    if name in self._retired:
                        raise InvalidInstance(
                            f"{key_path('experts', name)}: a retired expert: it votes no more"
                        ) from None
            raise
        normed = self._normalised(scores, paths)
        experts = np.array(rows, dtype=np.int64)
        if experts.size > 1 and (experts[1:] < experts[:-1]).any():
            order = np.argsort(experts, kind="stable")
            experts = experts[order]
            normed = {m: got[order] for m, got in normed.items()}
        e, cls, v, _ = self._triples(experts, normed, np.zeros(experts.size, dtype=np.int64))
        ex, cl, va = np.concatenate(e), np.concatenate(cls), np.concatenate(v)
        if not self._plain:  # blocks of several normalisations and subsets interleave
            order = np.lexsort((cl, ex))
            ex, cl, va = ex[order], cl[order], va[order]
        # (plain: each expert votes once, so row-major non-zeros come sorted)
        return Experts._trusted(ex, cl, va)

    def _normalised(
        self, scores: np.ndarray, paths: list[tuple[str, bool]]
    ) -> dict[str, np.ndarray]:
        """The votes ``scores`` (a row per vote) under each normalisation this space uses:
        its listed ones, and "rank" when subsets are averaged by rank."""
        norms = list(self._norms)
        if self._subsets is not None and "rank" in self._subsets.by and "rank" not in norms:
            norms.append("rank")
        return {m: normalise_votes(scores, paths, m, self.labels) for m in norms}

    def _triples(
        self, expert: np.ndarray, normed: Mapping[str, np.ndarray], payload: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """The (sub-expert, class, vote) triples of votes ``normed`` (under each
        normalisation, a row per vote, the rows of one payload together as ``payload``
        numbers them) by experts ``expert``, in blocks: the named sub-experts', the
        derived ones', then the split classes'; with the block's rows each triple comes
        from."""
        e, cls, v, rows = [], [], [], []
        q = self._q
        for j, norm in enumerate(self._norms):
            scores = normed[norm]
            r, c = np.nonzero(scores)
            e.append(self._named_at[expert[r], j] if self._layered else expert[r] * q + j)
            cls.append(c)
            v.append(scores[r, c])
            rows.append(r)
        if self._subsets is not None:
            by = {b: normed[self._normalize if b == "score" else b] for b in self._subsets.by}
            t, c, value, r = self._subsets.votes(len(self._expert_names), expert, by, payload)
            e.append(self._derived_at[t] if self._layered else len(self._expert_names) * q + t)
            cls.append(c)
            v.append(value)
            rows.append(r)
        if self._s:
            scores = normed[self._normalize]
            split = np.array(self._split, dtype=np.int64)
            pieces = scores[:, split]
            r, at = np.nonzero(pieces)
            if self._layered:
                e.append(self._split_at[expert[r], at])
            else:
                first = len(self._expert_names) * q + self._n_derived
                e.append(first + expert[r] * self._s + at)
            cls.append(split[at])
            v.append(pieces[r, at])
            rows.append(r)
        return e, cls, v, rows


def _expert_rows(
    n: int, row: np.ndarray, e: np.ndarray, c: np.ndarray, v: np.ndarray, size: int
) -> list[Experts]:
    """One :class:`Experts` per row of the triples ``(e, c, v)`` (row ``row``), each
    sorted by (expert, class), with its extent (at least ``size``), classes and value
    range worked out at once; each views the shared read-only arrays."""
    if row.size > 1:
        dr, de, dc = (np.diff(a) for a in (row, e, c))
        if not ((dr > 0) | ((dr == 0) & ((de > 0) | ((de == 0) & (dc > 0))))).all():
            order = np.lexsort((c, e, row))
            row, e, c, v = row[order], e[order], c[order], v[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=ptr[1:])
    filled = ptr[1:] > ptr[:-1]
    sizes = np.full(n, size, dtype=np.int64)
    classes = np.zeros(n, dtype=np.int64)
    low, high = np.zeros(n), np.zeros(n)
    if v.size:
        starts = ptr[:-1][filled]
        sizes[filled] = np.maximum(e[ptr[1:][filled] - 1] + 1, size)
        classes[filled] = np.maximum.reduceat(c, starts) + 1
        low[filled] = np.minimum.reduceat(v, starts)
        high[filled] = np.maximum.reduceat(v, starts)
    return Experts.rows(e, c, v, ptr, sizes, classes, low, high)


def _listed(value: Any, name: str) -> list[str]:
    """The names of one part of a change: none, or a non-empty list of distinct names."""
    return [] if value is None else read_names(value, name)


def _placed(names: list[str], at: np.ndarray) -> list[str]:
    """``names[i]`` at position ``at[i]``."""
    out = [""] * len(names)
    for name, i in zip(names, at.tolist(), strict=True):
        out[i] = name
    return out
