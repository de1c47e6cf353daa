"""``python -m _sampled <uvicorn's arguments>``: uvicorn with :mod:`_sampler` installed."""

import uvicorn
from _sampler import install

install()
uvicorn.main()
