"""``python -m cloud_hub.demo``: the demo without the ``cloud-hub`` command line."""

import sys

from cloud_hub.demo.cli import main

sys.exit(main())
