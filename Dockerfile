# One image for every kubus service: `kubus sim`, and the pipeline's services as they land.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY kube kube
COPY messages messages
COPY sim sim
COPY ingest ingest
COPY reconciler reconciler
COPY executor executor
COPY store store
COPY migrations migrations
COPY runtime runtime
COPY replay replay
COPY kubus kubus
RUN pip install --no-cache-dir .
ENTRYPOINT ["kubus"]
