"""Input spaces: what a model's users send, and how it becomes a learner's instance.

An :class:`InputSpace` describes a model's input declaratively (ALGORITHMS.md §1). It is
built from, and exported to, a plain JSON-able config; it reads JSON-like payloads,
validates them with messages that name the offending field, and encodes them as the
canonical :class:`~models.core.instance.Attributes` or :class:`~models.core.instance.Experts` a
learner of ``input_kind`` "attributes" or "experts" takes.

Config::

    {"labels": ["spam", "ham"],
     "attributes": {"n_features": 10}                  # dense list or {index: value}
                 | {"feature_names": ["a", "b"]}       # closed vocabulary
                 | {"hashing": {"n_features": 1024, "seed": 0}},   # open vocabulary
                   (+ "constant_attribute": false)     # one extra attribute, always 1
     "experts": {"expert_names": ["clf_a", "clf_b"],
                 "normalize": "raw" | "sum-to-one" | "rank" | "argmax",
                 "threshold_experts": false,           # k sub-experts, one per class
                 "split_classes": null | "all" | [label, ...]}}   # §1.3 per-class split

At least one of ``attributes`` and ``experts`` is given.

Payload: ``{"features": ..., "experts": {name: vote}}``. A missing (or null) ``features``
is the all-zero attribute vector (the constant attribute is still 1); a missing ``experts``
means every expert abstains. An expert missing from ``experts``, or whose vote is null or
``{}``, abstains (votes 0 for every class, whatever ``normalize`` says). A vote is
``{label: score}`` (missing labels score 0), a list of k scores in label order, or a bare
label (score 1 for it). ``normalize`` then maps each voting expert's k scores:
``sum-to-one`` divides by their sum (all-zero stays zero, negatives are an error),
``rank`` gives the label of rank r (r = number of strictly higher scores) the vote
(k-1-r)/(k-1), and ``argmax`` votes 1 for the top label (ties to the smallest class).
Value ranges are otherwise left to the learners.

Numbering. In form "attributes", features 0..d-1 come first, then the constant attribute
at index d. In form "experts", with n named experts, s split classes c_0 < ... < c_{s-1},
m = d (+1 with the constant) attributes and k classes, the sub-experts are, in order:

==============================  ===========================  ========================
block                           sub-expert index             votes
==============================  ===========================  ========================
named expert i                  i                            its normalised k-vector
split piece (i, c_j)            n + i*s + j                  x_i^{c_j} for c_j only
attribute a, class c (§1.4)     n*(1+s) + a*k + c            x_a for class c only
threshold for class c           n*(1+s) + m*k + c            1 for class c only
==============================  ===========================  ========================

so the constant attribute's k sub-experts are the last attribute's, and with attribute
offset A = n*(1+s) the linear machine reads W[c][a] = w[A + a*k + c].
:meth:`InputSpace.describe_experts` names every index.
"""

from __future__ import annotations

import copy
import hashlib
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
from models.core.params import Bool, Integer, InvalidParameter, Labels, Options
from models.inputs.batch import sparse_attributes
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

__all__ = ["FORMS", "NORMALIZE", "InputSpace"]

FORMS = ("attributes", "experts")
NORMALIZE = ("raw", "sum-to-one", "rank", "argmax")
Label = str | int

_HASH_CACHE_LIMIT = 1 << 16
_DIGIT_KEYS = re.compile(r"[0-9]{1,18}(?:,[0-9]{1,18})*")


class InputSpace:
    """The declarative input of a model: labels, attributes and/or experts (§1).

    Parameters
    ----------
    labels
        At least two distinct label names (strings or integers); class c is ``labels[c]``.
    attributes
        The ``attributes`` config section, or None (see the module docstring).
    experts
        The ``experts`` config section, or None.

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
        self._expert_index: dict[str, int] = {}
        self._expert_names: tuple[str, ...] = ()
        self._split: tuple[int, ...] = ()
        self._normalize, self._threshold = "raw", False
        self._class: dict[Any, int] = {v: c for c, v in enumerate(self.labels)}
        self._class.update({str(v): c for c, v in enumerate(self.labels) if isinstance(v, int)})
        # the labels as JSON object keys, in class order (None: a label has no such key)
        keys = tuple(v if isinstance(v, str) else str(v) for v in self.labels)
        exact = all(self._class.get(key) == c for c, key in enumerate(keys))
        self._keys_in_order = keys if exact and len(set(keys)) == self._k else None
        self.attributes = None if attributes is None else self._read_attributes(attributes)
        self.experts = None if experts is None else self._read_experts(experts)
        self._s = len(self._split)
        self._attr_offset = len(self._expert_names) * (1 + self._s)
        self._m = 0 if attributes is None else self._d + int(self._constant)
        self._threshold_offset = self._attr_offset + self._m * self._k

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
        keys = ("expert_names", "normalize", "threshold_experts", "split_classes")
        section = read_section(section, "experts", keys)
        if "expert_names" not in section:
            raise InvalidParameter("experts.expert_names", None, "a list of expert names")
        names = read_names(section["expert_names"], "experts.expert_names")
        self._expert_names = tuple(names)
        self._expert_index = {name: i for i, name in enumerate(names)}
        self._normalize = check_option(
            section.get("normalize", "raw"), "experts.normalize", Options(NORMALIZE)
        )
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
        return {
            "expert_names": names,
            "normalize": self._normalize,
            "threshold_experts": self._threshold,
            "split_classes": split,
        }

    # -- config --------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> InputSpace:
        """Build from a config ``{"labels": [...], "attributes": ..., "experts": ...}``."""
        config = read_section(config, "input", ("labels", "attributes", "experts"))
        if "labels" not in config:
            raise InvalidParameter("labels", None, "a list of at least 2 labels")
        return cls(config["labels"], config.get("attributes"), config.get("experts"))

    def config(self) -> dict[str, Any]:
        """The JSON-able config that :meth:`from_config` turns back into this space."""
        out: dict[str, Any] = {"labels": list(self.labels)}
        if self.attributes is not None:
            out["attributes"] = copy.deepcopy(self.attributes)
        if self.experts is not None:
            out["experts"] = copy.deepcopy(self.experts)
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InputSpace) and self.config() == other.config()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"InputSpace.from_config({self.config()!r})"

    # -- labels, forms and sizes ----------------------------------------------------

    @property
    def n_classes(self) -> int:
        return self._k

    def _class_key(self, label: Any) -> int | None:
        if isinstance(label, bool) or not isinstance(label, str | int | np.integer):
            return None
        return self._class.get(label)

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
        """The "experts"-form sub-expert indices of a named expert: itself, then its pieces."""
        i = self._expert_index.get(name, -1) if self.experts is not None else -1
        if i < 0:
            raise InvalidInstance(f"experts.{name}: unknown expert")
        n = len(self._expert_names)
        return [i] + [n + i * self._s + j for j in range(self._s)]

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
            return attrs
        labels = [f"@label:{label}" for label in self.labels]
        names = self._expert_names
        out = [f"expert:{name}" for name in names]
        out += [f"expert:{name}{labels[c]}" for name in names for c in self._split]
        out += [a + lab for a in attrs for lab in labels]
        out += [f"threshold{lab}" for lab in labels] if self._threshold else []
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
            return x
        parts = []
        if self.experts is not None:
            parts.append(self._encode_votes(votes))
        if x is not None:
            parts.append(attributes_as_experts(x, self._k, offset=self._attr_offset))
        if self._threshold:
            parts.append(threshold_experts(self._k, offset=self._threshold_offset))
        return concat_experts(parts)

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
        (:func:`~models.inputs.batch.sparse_attributes`), to the same instances.
        """
        self._check_form(form)
        fast: dict[int, Attributes] = {}
        if form == "attributes" and self._mode == "n_features":
            rows = [
                t
                for t, p in enumerate(payloads)
                if type(p) is dict and len(p) == 1 and type(p.get("features")) is dict
            ]
            got = sparse_attributes(
                [payloads[t]["features"] for t in rows], self._d, self._constant
            )
            fast = {t: x for t, x in zip(rows, got, strict=True) if x is not None}
        out: list[Attributes | Experts | InvalidInstance | InvalidParameter] = []
        for t, payload in enumerate(payloads):
            x = fast.get(t)
            if x is not None:
                out.append(x)
                continue
            try:
                out.append(self.encode(payload, form))
            except (InvalidInstance, InvalidParameter) as e:
                out.append(e)
        return out

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
        rows, paths, scores = read_votes(
            votes,
            self._expert_index,
            self._class_key,
            self.labels,
            self._class,
            self._keys_in_order,
        )
        scores = normalise_votes(scores, paths, self._normalize, self.labels)
        experts = np.array(rows, dtype=np.int64)
        if experts.size > 1 and (experts[1:] < experts[:-1]).any():
            order = np.argsort(experts, kind="stable")
            experts, scores = experts[order], scores[order]
        # each expert votes once, so row-major non-zeros come sorted by (expert, class)
        r, c = np.nonzero(scores)
        e, cls, v = [experts[r]], [c], [scores[r, c]]
        if self._s:
            split = np.array(self._split, dtype=np.int64)
            pieces = scores[:, split]
            r, j = np.nonzero(pieces)
            e.append(len(self._expert_names) + experts[r] * self._s + j)
            cls.append(split[j])
            v.append(pieces[r, j])
        return Experts._trusted(np.concatenate(e), np.concatenate(cls), np.concatenate(v))
