"""Preprocessors on the real cluster: equal to scikit-learn, and sklearn's estimator contract."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import sklearn.impute as skimpute
import sklearn.pipeline as skpipeline
import sklearn.preprocessing as skp
from numpy.testing import assert_allclose

import airflowless.data.preprocessors as pp
from airflowless import data
from airflowless.data.preprocessors import (
    BatchMapper,
    Chain,
    Concatenator,
    InvalidParameterError,
    LabelEncoder,
    MaxAbsScaler,
    MinMaxScaler,
    Normalizer,
    NotFittedError,
    OneHotEncoder,
    OrdinalEncoder,
    Preprocessor,
    RobustScaler,
    SimpleImputer,
    StandardScaler,
)
from airflowless.data.transforms import ColumnNotFoundError

pytestmark = pytest.mark.usefixtures("cluster_client")

_rng = np.random.default_rng(7)
_N = 240
FRAME = pd.DataFrame({
    "a": _rng.normal(3.0, 2.0, _N),
    "b": np.where(_rng.random(_N) < 0.1, np.nan, _rng.exponential(2.0, _N)),  # with missing values
    "i": _rng.integers(-50, 50, _N),
    "const": np.full(_N, 0.1),
    "m": _rng.choice([1.0, 2.0, 5.0, np.nan], _N, p=[0.3, 0.3, 0.3, 0.1]),
    "color": _rng.choice(["red", "green", "blue"], _N),
    "size": _rng.choice([3, 1, 2, 10], _N),
    "label": _rng.choice(["no", "yes", "maybe"], _N),
})
_FRAME_COPY = FRAME.copy()
NUMERIC = ["a", "b", "i", "const"]
BOUNDS = [0, 50, 130, 131, _N]  # four blocks of unequal sizes, one of a single row


def make_ds(frame: pd.DataFrame = FRAME, bounds: list[int] = BOUNDS) -> data.Dataset:
    return data.from_pandas([frame.iloc[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)])


def _double_a(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(a2=df["a"] * 2)


# every public preprocessor, as a factory of a typical instance
CASES: dict[str, Callable[[], Preprocessor]] = {
    "MinMaxScaler": lambda: MinMaxScaler(columns=NUMERIC),
    "StandardScaler": lambda: StandardScaler(columns=NUMERIC),
    "MaxAbsScaler": lambda: MaxAbsScaler(columns=NUMERIC),
    "RobustScaler": lambda: RobustScaler(columns=["a", "b"], quantile_range=(10, 90)),
    "Normalizer": lambda: Normalizer(columns=["a", "i"], norm="l1"),
    "OrdinalEncoder": lambda: OrdinalEncoder(columns=["color", "size"]),
    "OneHotEncoder": lambda: OneHotEncoder(columns=["color", "size"]),
    "LabelEncoder": lambda: LabelEncoder(label_column="label"),
    "SimpleImputer": lambda: SimpleImputer(columns=["b", "m"], strategy="most_frequent"),
    "Concatenator": lambda: Concatenator(columns=["a", "i"], output_column_name="x", dtype="float32"),
    "Chain": lambda: Chain(SimpleImputer(columns=["b"]), StandardScaler(columns=["a", "b"])),
    "BatchMapper": lambda: BatchMapper(_double_a),
}
FITTABLE = [name for name, make in CASES.items() if make()._is_fittable]

_fitted: dict[str, Preprocessor] = {}


def fitted(name: str) -> Preprocessor:
    """A fitted copy of ``CASES[name]`` (fitted once per session)."""
    if name not in _fitted:
        _fitted[name] = CASES[name]().fit(make_ds())
    return copy.deepcopy(_fitted[name])


def _arrow_normalized(frame: pd.DataFrame) -> pd.DataFrame:
    return pa.Table.from_pandas(frame, preserve_index=False).to_pandas()


# -- equal to scikit-learn -------------------------------------------------------------


@pytest.mark.parametrize(("ours", "theirs", "attributes"), [
    (MinMaxScaler, skp.MinMaxScaler, ["data_min_", "data_max_"]),
    (StandardScaler, skp.StandardScaler, ["mean_", "scale_"]),
    (MaxAbsScaler, skp.MaxAbsScaler, ["max_abs_"]),
    (RobustScaler, skp.RobustScaler, ["center_", "scale_"]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_scalers_match_sklearn(ours: Any, theirs: Any, attributes: list[str]) -> None:
    scaler = ours(columns=NUMERIC).fit(make_ds())
    out = scaler.transform(make_ds()).to_pandas()
    reference = theirs().fit(FRAME[NUMERIC].to_numpy(dtype=float))
    assert_allclose(out[NUMERIC].to_numpy(), reference.transform(FRAME[NUMERIC].to_numpy(dtype=float)),
                    rtol=1e-9, atol=1e-12)
    for name in attributes:
        assert_allclose([getattr(scaler, name)[c] for c in NUMERIC], getattr(reference, name), rtol=1e-9)
    assert np.isfinite(out["const"]).all()  # a constant column stays finite
    assert out["b"].isna().sum() == FRAME["b"].isna().sum()  # missing stays missing
    pd.testing.assert_series_equal(out["color"], FRAME["color"], check_dtype=False)


def test_robust_scaler_quantile_range_matches_sklearn() -> None:
    scaler = RobustScaler(columns=["a", "i"], quantile_range=(10, 90)).fit(make_ds())
    reference = skp.RobustScaler(quantile_range=(10, 90)).fit(FRAME[["a", "i"]].to_numpy(dtype=float))
    assert_allclose([scaler.scale_["a"], scaler.scale_["i"]], reference.scale_, rtol=1e-12)
    out = scaler.transform(make_ds()).to_pandas()
    assert_allclose(out[["a", "i"]].to_numpy(), reference.transform(FRAME[["a", "i"]].to_numpy(dtype=float)))


@pytest.mark.parametrize("norm", ["l2", "l1", "max"])
def test_normalizer_matches_sklearn_without_fit(norm: str) -> None:
    frame = FRAME[["a", "i", "color"]].copy()
    frame.loc[5, ["a", "i"]] = 0  # a zero row stays zero
    out = Normalizer(columns=["a", "i"], norm=norm).transform(make_ds(frame)).to_pandas()
    expected = skp.normalize(frame[["a", "i"]].to_numpy(dtype=float), norm=norm)
    assert_allclose(out[["a", "i"]].to_numpy(), expected, rtol=1e-12)
    assert (out.loc[5, ["a", "i"]] == 0).all()


def test_ordinal_encoder_matches_sklearn_and_unknown_is_missing() -> None:
    encoder = OrdinalEncoder(columns=["color", "size"]).fit(make_ds())
    reference = skp.OrdinalEncoder().fit(FRAME[["color", "size"]])
    assert [encoder.categories_[c] for c in ["color", "size"]] == [list(c) for c in reference.categories_]
    out = encoder.transform(make_ds()).to_pandas()
    assert_allclose(out[["color", "size"]].to_numpy(dtype=float), reference.transform(FRAME[["color", "size"]]))
    unknown = encoder.transform_batch(pd.DataFrame({"color": ["purple", "red"], "size": [3, 99]}))
    assert unknown["color"].isna().tolist() == [True, False]
    assert unknown["size"].isna().tolist() == [False, True]


def test_one_hot_encoder_matches_sklearn_and_unknown_is_all_zeros() -> None:
    encoder = OneHotEncoder(columns=["color", "size"]).fit(make_ds())
    reference = skp.OneHotEncoder(sparse_output=False, handle_unknown="ignore").fit(FRAME[["color", "size"]])
    names = list(reference.get_feature_names_out())
    out = encoder.transform(make_ds()).to_pandas()
    assert list(out.columns) == ["a", "b", "i", "const", "m", "label", *names]
    assert_allclose(out[names].to_numpy(dtype=float), reference.transform(FRAME[["color", "size"]]))
    batch = pd.DataFrame({"color": ["purple", "red"], "size": [99, 2]})
    assert_allclose(encoder.transform_batch(batch)[names].to_numpy(dtype=float), reference.transform(batch))


def test_label_encoder_matches_sklearn_and_serving_batch_without_label_passes() -> None:
    encoder = LabelEncoder(label_column="label").fit(make_ds())
    reference = skp.LabelEncoder().fit(FRAME["label"])
    assert encoder.classes_ == list(reference.classes_)
    out = encoder.transform(make_ds()).to_pandas()
    assert out["label"].tolist() == reference.transform(FRAME["label"]).tolist()
    request = FRAME[["a", "b"]].head(3)
    pd.testing.assert_frame_equal(encoder.transform_batch(request), request)


@pytest.mark.parametrize(("kwargs", "columns"), [
    ({"strategy": "mean"}, ["b", "m"]),
    ({"strategy": "most_frequent"}, ["b", "m"]),  # b: all counts 1, ties go to the smallest value
    ({"strategy": "constant", "fill_value": -1.0}, ["b", "m"]),
], ids=["mean", "most_frequent", "constant"])
def test_simple_imputer_matches_sklearn(kwargs: dict[str, Any], columns: list[str]) -> None:
    imputer = SimpleImputer(columns=columns, **kwargs).fit(make_ds())
    reference = skimpute.SimpleImputer(**kwargs).fit(FRAME[columns])
    assert_allclose([imputer.statistics_[c] for c in columns], reference.statistics_.astype(float))
    out = imputer.transform(make_ds()).to_pandas()
    assert_allclose(out[columns].to_numpy(), reference.transform(FRAME[columns]))


def test_simple_imputer_most_frequent_on_strings() -> None:
    frame = pd.DataFrame({"s": ["x", None, "y", "y", None, "x", "y"]})
    imputer = SimpleImputer(columns=["s"], strategy="most_frequent").fit(make_ds(frame, [0, 3, 7]))
    assert imputer.statistics_ == {"s": "y"}
    assert imputer.transform(make_ds(frame, [0, 3, 7])).to_pandas()["s"].tolist() == list("xyyyyxy")


def test_concatenator_makes_a_vector_column_without_fit() -> None:
    out_ds = Concatenator(columns=["a", "i"], output_column_name="x", dtype="float32").transform(make_ds())
    assert out_ds.schema().field("x").type == pa.list_(pa.float32(), 2)  # a tensor column: (rows, 2) in batches
    out = out_ds.to_pandas()
    assert "a" not in out.columns and "i" not in out.columns
    assert_allclose(np.stack(out["x"].to_list()), FRAME[["a", "i"]].to_numpy(dtype=np.float32))


def test_chain_fits_each_step_on_the_previous_output_and_fuses_into_one_task() -> None:
    chain = Chain(SimpleImputer(columns=["b"]), StandardScaler(columns=["a", "b"]),
                  Concatenator(columns=["a", "b"], output_column_name="features"))
    assert chain.fit(make_ds()) is chain
    reference = skpipeline.make_pipeline(skimpute.SimpleImputer(), skp.StandardScaler()).fit(FRAME[["a", "b"]])
    out_ds = chain.transform(make_ds())
    out = out_ds.to_pandas()
    assert_allclose(np.stack(out["features"].to_list()), reference.transform(FRAME[["a", "b"]]), rtol=1e-9,
                    atol=1e-12)
    physical = out_ds.explain().split("-- physical plan --")[1].strip()
    assert physical == ("ReadOp[ReadPandas+MapBatches(SimpleImputer)+MapBatches(StandardScaler)"
                        "+MapBatches(Concatenator)]")


def test_chain_of_nullable_steps_serves_like_the_dataset() -> None:
    # OrdinalEncoder gives nullable Int64 (<NA> for an unknown color); Concatenator makes float NaN of it
    chain = Chain(OrdinalEncoder(columns=["color"]), Concatenator(columns=["color", "a"], output_column_name="x"))
    chain.fit(make_ds())
    frame = FRAME.head(6).assign(color=["red", "purple", "blue", "red", "green", "purple"])
    via_dataset = chain.transform(make_ds(frame, [0, 2, 6])).to_pandas()
    via_batch = chain.transform_batch(frame)
    assert via_batch["x"][1].dtype == np.float64 and np.isnan(via_batch["x"][1][0])
    pd.testing.assert_frame_equal(via_dataset, _arrow_normalized(via_batch))


@pytest.mark.parametrize("batch_format", ["pandas", "numpy", "pyarrow"])
def test_batch_mapper_applies_the_function_without_fit(batch_format: str) -> None:
    def add_one(batch: Any) -> Any:
        if batch_format == "pyarrow":
            return batch.set_column(batch.column_names.index("a"), "a", pa.compute.add(batch["a"], 1))
        if batch_format == "numpy":
            return {**batch, "a": batch["a"] + 1}
        return batch.assign(a=batch["a"] + 1)

    mapper = BatchMapper(add_one, batch_format=batch_format)
    out = mapper.transform(make_ds()).to_pandas()
    assert_allclose(out["a"], FRAME["a"] + 1)
    assert_allclose(mapper.transform_batch(FRAME.head(4))["a"], FRAME["a"].head(4) + 1)


def test_fit_ignores_empty_blocks() -> None:
    ds = make_ds(bounds=[0, 0, 100, 100, _N])
    scaler = MinMaxScaler(columns=["a"]).fit(ds)
    assert scaler.data_min_["a"] == FRAME["a"].min()
    assert OneHotEncoder(columns=["color"]).fit(ds).categories_ == {"color": ["blue", "green", "red"]}


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", FITTABLE)
def test_transform_before_fit_raises(name: str) -> None:
    preprocessor = CASES[name]()
    with pytest.raises(NotFittedError, match=r"not fitted yet: call .*fit\(dataset\)"):
        preprocessor.transform(make_ds())
    with pytest.raises(ValueError, match="fit"):
        preprocessor.transform_batch(FRAME)


@pytest.mark.parametrize(("make", "parameter", "got"), [
    (lambda: MinMaxScaler(columns="a"), "columns", "'a'"),
    (lambda: StandardScaler(columns=[]), "columns", "[]"),
    (lambda: MaxAbsScaler(columns=["a", "a"]), "columns", "['a', 'a']"),
    (lambda: RobustScaler(columns=["a"], quantile_range=(75, 25)), "quantile_range", "(75, 25)"),
    (lambda: OneHotEncoder(columns=[1]), "columns", "[1]"),
    (lambda: OrdinalEncoder(columns=None), "columns", "None"),
    (lambda: LabelEncoder(label_column=3), "label_column", "3"),
    (lambda: SimpleImputer(columns=["b"], strategy="median"), "strategy", "'median'"),
    (lambda: SimpleImputer(columns=["b"], strategy="constant"), "fill_value", "None"),
    (lambda: Chain(), "preprocessors", "()"),
    (lambda: Chain(MinMaxScaler), "preprocessors", "MinMaxScaler"),
    (lambda: Normalizer(columns=["a"], norm="l3"), "norm", "'l3'"),
    (lambda: Concatenator(columns=["a"], dtype="no-such-dtype"), "dtype", "'no-such-dtype'"),
    (lambda: BatchMapper(fn=3), "fn", "3"),
    (lambda: BatchMapper(fn=_double_a, batch_format="polars"), "batch_format", "'polars'"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_parameters_raise_at_fit_with_one_wording(make: Any, parameter: str, got: str) -> None:
    preprocessor = make()  # __init__ never validates
    owner = type(preprocessor).__name__
    with pytest.raises(InvalidParameterError) as info:
        preprocessor.fit(make_ds())
    message = str(info.value)
    assert message.startswith(f"The {parameter!r} parameter of {owner} must be ")
    assert "; got " in message and got in message.split("; got ")[1]
    assert message.endswith(f"Pass a valid value to {owner}(...) and call it again.")
    assert isinstance(info.value, ValueError)
    if not preprocessor._is_fittable:  # a stateless transform validates too
        with pytest.raises(InvalidParameterError, match=parameter):
            preprocessor.transform(make_ds())


def test_missing_columns_are_named() -> None:
    with pytest.raises(ColumnNotFoundError, match="nope"):
        MinMaxScaler(columns=["nope"]).fit(make_ds())
    scaler = fitted("MinMaxScaler")
    with pytest.raises(ColumnNotFoundError, match=r"MinMaxScaler: column\(s\) \['i', 'const'\] not found"):
        scaler.transform_batch(FRAME[["a", "b"]])


# -- persistence and serving ---------------------------------------------------------------


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
@pytest.mark.parametrize("name", list(CASES))
def test_pickle_round_trip_keeps_learned_state(name: str, dumps: Any) -> None:
    preprocessor = fitted(name)
    restored = pickle.loads(dumps(preprocessor))
    assert repr(restored) == repr(preprocessor)
    for attribute in preprocessor._learned_attributes():
        assert getattr(restored, attribute) == getattr(preprocessor, attribute)
    pd.testing.assert_frame_equal(restored.transform_batch(FRAME), preprocessor.transform_batch(FRAME))


def test_save_and_load(tmp_path: Any) -> None:
    chain = Chain(StandardScaler(columns=["a"]), BatchMapper(lambda df: df.assign(z=df["a"] + 1)))
    chain.fit(make_ds())
    chain.save(tmp_path / "preprocessor.pkl")
    loaded = Preprocessor.load(tmp_path / "preprocessor.pkl")
    assert loaded.preprocessors[0].mean_ == chain.preprocessors[0].mean_
    pd.testing.assert_frame_equal(loaded.transform_batch(FRAME), chain.transform_batch(FRAME))
    with pytest.raises(TypeError, match="holds a Chain, not a MinMaxScaler"):
        MinMaxScaler.load(tmp_path / "preprocessor.pkl")


@pytest.mark.parametrize("name", list(CASES))
def test_transform_batch_equals_transform(name: str) -> None:
    preprocessor = fitted(name)
    via_dataset = preprocessor.transform(make_ds()).to_pandas()
    via_batch = preprocessor.transform_batch(FRAME)
    pd.testing.assert_frame_equal(via_dataset, _arrow_normalized(via_batch))
    pd.testing.assert_frame_equal(FRAME, _FRAME_COPY)  # transform_batch left its input alone


def test_transform_is_lazy_and_frozen_at_call_time() -> None:
    scaler = MinMaxScaler(columns=["a"]).fit(make_ds())
    out = scaler.transform(make_ds())
    scaler.fit(make_ds(FRAME.assign(a=FRAME["a"] * 10)))  # a later fit does not change `out`
    assert_allclose(out.to_pandas()["a"].agg(["min", "max"]), [0.0, 1.0])


# -- the contract, for every preprocessor ---------------------------------------------------


def test_cases_cover_every_public_preprocessor() -> None:
    public = {getattr(pp, n) for n in pp.__all__}
    classes = {c for c in public if isinstance(c, type) and issubclass(c, Preprocessor) and c is not Preprocessor}
    assert {type(make()) for make in CASES.values()} == classes


class _Invalid:
    """A value no constraint accepts (except 'any value')."""


@pytest.mark.parametrize("name", list(CASES))
def test_conformance(name: str) -> None:
    preprocessor = CASES[name]()
    cls = type(preprocessor)
    params = preprocessor.get_params()
    # __init__ stores its arguments, and nothing else
    assert vars(preprocessor) == params
    assert set(params) == set(cls._parameter_constraints), "every parameter declares a constraint"
    assert repr(preprocessor).startswith(f"{cls.__name__}(")
    # __init__ does not validate: invalid values are stored as given, fit rejects them
    invalid = _Invalid()
    bad = cls(invalid) if name == "Chain" else cls(**dict.fromkeys(params, invalid))
    assert all(v is invalid or v == (invalid,) for v in bad.get_params().values())
    with pytest.raises(InvalidParameterError):
        bad.fit(make_ds())
    # fit returns self, adds only attributes ending in "_", and keeps the parameters
    assert preprocessor.fit(make_ds()) is preprocessor
    added = set(vars(preprocessor)) - set(params)
    assert all(a.endswith("_") and not a.startswith("_") for a in added)
    assert bool(added) == (cls._is_fittable and name != "Chain")  # a Chain's steps hold the state
    assert all(preprocessor.get_params()[k] is v for k, v in params.items())
    if not cls._is_fittable:
        assert CASES[name]().transform_batch(FRAME.head(3)) is not None  # needs no fit


# -- stats_: the fitted statistics keyed as Ray Data's preprocessors key them ----------------


def _expected_stats(name: str, p: Any) -> dict[str, Any]:
    """What Ray would report, written out from our learned attributes (one per preprocessor)."""
    index = {c: {v: i for i, v in enumerate(values)} for c, values in getattr(p, "categories_", {}).items()}
    return {
        "MinMaxScaler": lambda: {**{f"min({c})": p.data_min_[c] for c in NUMERIC},
                                 **{f"max({c})": p.data_max_[c] for c in NUMERIC}},
        "StandardScaler": lambda: {**{f"mean({c})": p.mean_[c] for c in NUMERIC},
                                   **{f"std({c})": p.scale_[c] for c in NUMERIC}},
        "MaxAbsScaler": lambda: {f"abs_max({c})": p.max_abs_[c] for c in NUMERIC},
        "RobustScaler": lambda: {f"{stat}({c})": getattr(p, attribute)[c] for c in ["a", "b"] for attribute, stat
                                 in [("low_quantile_", "low_quantile"), ("center_", "median"),
                                     ("high_quantile_", "high_quantile")]},
        "OrdinalEncoder": lambda: {f"unique_values({c})": index[c] for c in ["color", "size"]},
        "OneHotEncoder": lambda: {f"unique_values({c})": index[c] for c in ["color", "size"]},
        "LabelEncoder": lambda: {"unique_values(label)": {"maybe": 0, "no": 1, "yes": 2}},
        "SimpleImputer": lambda: {"most_frequent(b)": p.statistics_["b"], "most_frequent(m)": p.statistics_["m"]},
    }.get(name, dict)()


@pytest.mark.parametrize("name", list(CASES))
def test_stats_are_keyed_like_ray_and_derived_from_the_learned_attributes(name: str) -> None:
    preprocessor = fitted(name)
    stats = preprocessor.stats_
    assert stats == _expected_stats(name, preprocessor)
    assert bool(stats) == (preprocessor._is_fittable and name != "Chain")
    assert "stats_" not in vars(preprocessor)  # derived on access, never a second copy of the state


def test_stats_values_are_the_fitted_statistics() -> None:
    assert fitted("MinMaxScaler").stats_["min(a)"] == FRAME["a"].min()
    assert fitted("MinMaxScaler").stats_["max(b)"] == np.nanmax(FRAME["b"])
    assert fitted("StandardScaler").stats_["std(const)"] == 1.0  # constant column: the scale used, as in scikit-learn
    assert_allclose(fitted("StandardScaler").stats_["std(a)"], FRAME["a"].std(ddof=0), rtol=1e-12)
    assert fitted("MaxAbsScaler").stats_["abs_max(i)"] == FRAME["i"].abs().max()
    robust = fitted("RobustScaler").stats_
    assert robust["median(b)"] == np.nanmedian(FRAME["b"])
    assert_allclose([robust["low_quantile(b)"], robust["high_quantile(b)"]], np.nanpercentile(FRAME["b"], [10, 90]))
    assert fitted("OrdinalEncoder").stats_["unique_values(color)"] == {"blue": 0, "green": 1, "red": 2}
    mean = SimpleImputer(columns=["b"]).fit(make_ds())
    assert_allclose(mean.stats_["mean(b)"], np.nanmean(FRAME["b"]), rtol=1e-12)
    assert SimpleImputer(columns=["b"], strategy="constant", fill_value=0.0).fit(make_ds()).stats_ == {}


@pytest.mark.parametrize("name", FITTABLE)
def test_stats_before_fit_raise_not_fitted(name: str) -> None:
    preprocessor = CASES[name]()
    with pytest.raises(NotFittedError, match=r"not fitted yet: call .*fit\(dataset\)"):
        preprocessor.stats_  # noqa: B018
    assert not hasattr(preprocessor, "stats_")  # NotFittedError is an AttributeError too, as in scikit-learn
