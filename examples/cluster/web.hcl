# Three replicas spread over a cluster's nodes, behind the traffik of every
# node (README, "Cluster mode"). `host` addressing reaches each replica at
# its node's address and published port; `reuse_port` lets the traffiks of
# several nodes run on one machine share the port.
deployment "prod" "web" {
  image    = "voodu-echo:latest"   # examples/build-echo-image.sh
  replicas = 3
  ports    = ["8084"]

  probes {
    readiness {
      http_get { path = "/ready" }
    }
  }

  traffik "http" {
    port       = 8084
    bind       = "127.0.0.1:8080"
    addressing = "host"
    reuse_port = true
  }
}
