# The blocks `vd plugins:check --block example.hcl` validates: as an
# operator writes them inside a deployment or a statefulset.
{{name}} "http" {
  greeting = "hi"
}
{{name}} "default" {}
