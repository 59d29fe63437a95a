"""BERT on a DTensor mesh: each weight's layout, the sharded classifier and masked LM, their exports.

Built on keras_tpu.parallel.mesh (the mesh, ShardedBackend, MeshModel): each device holds
1/K of every attention and FFN kernel (the masked LM: and of the tied vocabulary table);
the run is the engine's, and the export serves exactly like an unsharded run's.

Modules, in reading order:
  mesh_classifier.py  bert_layout_map, build_classifier, ShardedBert (the MeshModel a run uses)
  mesh_export.py      an exported encoder read into the mesh model; the mesh model's export
  mesh_pretraining.py the masked LM's layouts (vocabulary rows), ShardedMaskedLM (its MeshModel)

Entry points: `mesh_classifier.ShardedBert`, `mesh_export.load_native_encoder` (bert_task.py),
`mesh_pretraining.ShardedMaskedLM` (pretraining/mlm_task.py).
"""
