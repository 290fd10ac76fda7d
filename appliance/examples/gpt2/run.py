"""The GPT-2 model directory's entry point, as in the Cerebras Model Zoo:

    python run.py CSX --params params.yaml --num_csx 1 --num_steps 100 \\
        --model_dir model_dir --mode train

It submits the job to the appliance (CSX; the address in $CSCTL_SERVER or --server) and
follows it to the end: `python -m appliance.run --help` lists every option.
"""

import sys

from appliance.client.launcher import main

if __name__ == "__main__":
    sys.exit(main(model="gpt2"))
