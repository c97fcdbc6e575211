"""What the training apps share above the learner: the run's config parsed and checked
once (:mod:`.runspec`) and the ``data`` group's clips made on demand (:mod:`.data`)."""
