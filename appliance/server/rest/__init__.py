"""REST doors (FastAPI). Health endpoints now; the job API comes with the REST issue."""
