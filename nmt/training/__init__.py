"""One run's training: the loop (trainer.py), the update written once (update.py), the loss (loss.py), optimiser and
schedules (optim.py), the state a checkpoint holds (state.py), validation (validation.py), the TensorBoard log
(runlog.py), and clocks, progress and the rules that stop a run (meters.py)."""
