"""The toolkit's verl wing: everything a verl run loads from the toolkit, by path or by name, in one package.

* :mod:`rag_curriculum.verl.rewards`: the custom reward functions (``reward.custom_reward_function.path``, one
  file): ``compute_score`` (RAG-RL), ``compute_craft_score``, ``compute_search_score``, ``compute_globalrag_score``,
  ``compute_veritas_score``. verl loads the file by path in every reward worker; it imports only what scoring needs;
* :mod:`rag_curriculum.verl.tool`: ``SearchTool``, the toolkit's retriever as a tool of verl's multi-turn agent
  loop, and ``SearchR1ToolParser``, the Search-R1 tag protocol as its tool-call format
  (``recipes/verl/search_tool.yaml``; imports verl);
* :mod:`rag_curriculum.verl.curriculum`: the curriculum in verl's default (v1) trainer: ``CurriculumRLHFDataset``
  (``data.custom_cls``: the order and the steps checked) and ``CurriculumReplayBuffer``
  (``trainer.v1.sampler.custom_sampler``: each step's rows checked, recorded and logged, DAPO's filter, adaptive
  levels fed); ``curriculum_overrides`` for a shard folder;
* :mod:`rag_curriculum.verl.adaptive`: ``AdaptiveRLHFDataset`` (``data.custom_cls``), an adaptive curriculum fed
  by that replay buffer (or by the legacy trainer's ``on_batch_end``);
* :mod:`rag_curriculum.verl.data`: the shard files in curriculum order, the reward file, the prompt-length check,
  the steps verl makes of a curriculum and search-agent rows, for the launch scripts: ``python -m
  rag_curriculum.verl train-files | reward-path | lengths | check-lengths | steps | agent-data``.

``recipes/verl/*.sh`` launch verl with them. This package's ``__init__`` imports nothing, so loading one of its
modules loads that module's needs only. TRL's counterpart is :mod:`rag_curriculum.train`.
"""
