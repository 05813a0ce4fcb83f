# The OTM 5.9 trip data exchange service: one image for every role.
#
#   docker build -t otm:0.1.0 .
#   docker run --rm -p 8080:8080 -v otm-data:/data otm:0.1.0      # otm serve: embedded, data in /data
#   docker run --rm --env-file otm.env otm:0.1.0 worker --telemetry # any other role: give its arguments
#
# Roles (the arguments after the image name): serve (default), ingress, query, worker
# [--entities] [--telemetry], dispatcher, migrate, validate <file...>. Configuration: environment variables
# (README, "Configuration"); HOST is 0.0.0.0 here so that the port is reachable from outside.
#
# This file was not built on the development machine (it has no Docker engine). Its build steps
# were run there by hand with the same versions (Node 20.20.2, npm 10.8.2): npm ci, npm prune
# --omit=dev --ignore-scripts, the copy of the runtime files below, then otm serve/validate/help.

# ---- build: all dependencies (TypeScript is a devDependency), compile, then drop dev deps ----
FROM node:20.20.2-bookworm-slim AS build
WORKDIR /app
ENV npm_config_audit=false \
    npm_config_fund=false \
    npm_config_update_notifier=false
# The whole source tree (see .dockerignore): `npm ci` runs the root `prepare` script, `tsc -b`,
# which needs the sources of every workspace.
COPY . .
RUN npm ci
# Runtime dependencies only. --ignore-scripts: `prepare` (tsc -b) must not run again, TypeScript
# is gone after the prune.
RUN npm prune --omit=dev --ignore-scripts
# What the runtime needs, nothing else: the root package.json, node_modules (the workspace links
# in node_modules/@otm are relative, so they stay valid), and for each workspace its
# package.json, dist/ (compiled JavaScript and the model's JSON schemas) and bin/.
RUN set -eu; \
    mkdir -p /out; \
    cp -a package.json package-lock.json node_modules /out/; \
    for d in packages/* services/*; do \
      mkdir -p "/out/$d"; \
      cp -a "$d/package.json" "$d/dist" "/out/$d/"; \
      if [ -d "$d/bin" ]; then cp -a "$d/bin" "/out/$d/"; fi; \
    done; \
    find /out/packages /out/services -name '*.tsbuildinfo' -delete

# ---- runtime: Node.js, the compiled service, its production dependencies; not root ----
FROM node:20.20.2-bookworm-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    OTM_DATA_DIR=/data
WORKDIR /app
# Owned by root and read-only for the service user: the process cannot change its own code.
COPY --from=build /out/ /app/
# The embedded store and the generated token of `otm serve` (the distributed roles keep nothing
# here). A named volume mounted on /data takes over this owner.
RUN mkdir -p /data && chown 1000:1000 /data
# uid/gid 1000 is the `node` user of the base image; numeric so that Kubernetes'
# runAsNonRoot can check it.
USER 1000:1000
EXPOSE 8080
# Liveness of every role (each one serves /healthz on PORT). Kubernetes ignores this and uses its
# own probes (deploy/kubernetes).
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# SIGTERM reaches node directly (exec form): the service stops taking work, finishes, commits,
# closes, then exits.
ENTRYPOINT ["node", "services/otm/bin/otm.js"]
CMD ["serve"]
