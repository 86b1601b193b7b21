# Three replicas spread over three hosts of examples/hosts/rig.sh (README,
# "Three real hosts on one machine"), behind a traffik on every host.
# Each node runs with --advertise its host's address, so the bare port is
# published there; `host` addressing reaches each replica at that address
# and its published port, from any host.
deployment "prod" "web" {
  image    = "voodu-echo:latest"   # examples/build-echo-image.sh, then rig.sh load
  replicas = 3
  ports    = ["8084"]

  probes {
    readiness {
      http_get { path = "/ready" }
    }
  }

  traffik "http" {
    port       = 8084
    bind       = "0.0.0.0:8080"   # each host's own address, port 8080
    addressing = "host"
  }
}
