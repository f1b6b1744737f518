"""An experiment on top of the numerics: how far training in a low-precision recipe drifts from float32 on each
chip kind (``hybrid numerics``). :mod:`.recipes` holds the recipes (which GEMMs are quantized to which format,
delayed scaling), :mod:`.experiment` runs them (:func:`drift` -> :class:`DriftReport`)."""

from interop.numerics.drift.experiment import MODELS, DriftConfig, DriftReport, Run, Skipped, drift, supported
from interop.numerics.drift.recipes import RECIPES, Recipe, recipe_named

__all__ = ["MODELS", "RECIPES", "DriftConfig", "DriftReport", "Recipe", "Run", "Skipped", "drift", "recipe_named",
           "supported"]
