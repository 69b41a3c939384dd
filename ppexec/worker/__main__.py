"""``python -m ppexec.worker RUN_DIR``: one rank of a run, under any launcher (ppexec's own,
``deepspeed --module ppexec.worker``, torchrun, srun); the step loop is ``ppexec.worker.rank``."""

from ppexec.worker.rank import main

main()
