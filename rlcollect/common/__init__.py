"""What every layer shares, below all of them: the checks a ``load_state_dict`` makes
(:mod:`rlcollect.common.state`) and where a warning points (:mod:`rlcollect.common.callers`)."""
