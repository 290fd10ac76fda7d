"""`python -m appliance.run`: the Model Zoo-style launcher (appliance.client.launcher)."""

import sys

from appliance.client.launcher import main

if __name__ == "__main__":
    sys.exit(main())
