"""Label-templated instance pools for the OOLONG-style generator.

Ten datasets, named and labelled as the ten OOLONG-synth source datasets
(``abertsch72/oolong`` ``src/data_gen/oolong-synth/datasets_loader.py``: label lists
and order); the texts are this project's own stand-ins for the real rows.

Each dataset (:class:`~.dataset.Dataset`) maps a label to a list of templates and the
fillers they draw from; the pools live by kind in :mod:`.pools_queries`,
:mod:`.pools_messages` and :mod:`.pools_sentences`. The templates are written by
this project (no dataset is downloaded). They are built so that a language model can
recover the label from the text (the *kind* of question or the tone of a review), but
the label word itself never appears in the text, so a regex over label names recovers
nothing; ``tests/benchmarks/test_generator.py``
checks that for every rendered instance.

The hidden label of every instance is kept by the generator in a side table keyed by
instance text (``Window.label_of``); templates of different labels never render the
same text (also checked by the tests).
"""

from __future__ import annotations

from .dataset import Dataset
from .pools_messages import APP_REVIEWS, IMDB, SPAM
from .pools_queries import TREC_COARSE, YAHOO
from .pools_sentences import AGNEWS, FORMALITY, METAPHORS, MULTINLI, NEGATION

__all__ = ["DATASETS"]

DATASETS: dict[str, Dataset] = {d.name: d for d in (
    TREC_COARSE, SPAM, IMDB, AGNEWS, NEGATION, YAHOO, FORMALITY, MULTINLI, METAPHORS,
    APP_REVIEWS)}
