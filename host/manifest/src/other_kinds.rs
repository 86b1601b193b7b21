//! voodu's other top-level kinds, which this voodu does not run: each is
//! named with what this voodu offers instead, so that a file written for
//! voodu is refused whole with the way forward, or with
//! `vd apply --skip-unsupported` applied without them.

use crate::suggest::closest;

/// What a top-level block that is neither a deployment nor a statefulset
/// is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtherKind {
    /// A misspelt `deployment` or `statefulset`: always refused, never
    /// skipped.
    Typo(&'static str),
    /// A kind voodu documents, or a plugin kind (`postgres`), with what to
    /// write instead.
    Unsupported {
        /// What this voodu offers instead, as an instruction.
        instead: String,
    },
}

/// The kinds voodu documents besides deployment and statefulset, and what
/// this voodu offers instead of each.
const VOODU_KINDS: &[(&str, &str)] = &[
    (
        "ingress",
        "route to a workload with a balancer plugin block inside its deployment, such as traffik \"http\" { port = 8080 } or haproxy { ... }",
    ),
    (
        "app",
        "write a deployment with a balancer plugin block inside it, such as traffik \"http\" { port = 8080 }",
    ),
    (
        "asset",
        "mount files into a workload with volumes = [\"/host/path:/in/container:ro\"]",
    ),
    (
        "registry",
        "images are pulled by each host's Docker engine with its own credentials — run docker login on each host",
    ),
];

/// What an `ingress "scope" "name"` becomes here, exactly: a balancer
/// block inside the deployment it routes to (`service`, default its own
/// name), on its `port`; nested blocks replace a resource that points back
/// (the seed's design). `host` is named, since these balancers route by
/// port, and HAProxy's http mode is the one that sees host names.
pub fn ingress_instead(
    scope: &str,
    name: &str,
    service: Option<&str>,
    port: Option<u64>,
    host: Option<&str>,
) -> String {
    let service = service.unwrap_or(name);
    let port = port.map_or_else(
        || "<the deployment's port>".to_owned(),
        |port| port.to_string(),
    );
    let host = host
        .map(|host| format!(" (traffik routes by port; to route by the host name {host:?}, a haproxy \"http\" block with mode = \"http\" sees host names)"))
        .unwrap_or_default();
    format!(
        "write the route inside the deployment it routes to: deployment \"{scope}\" \"{service}\" {{ ... traffik \"http\" {{ port = {port} }} }}{host}"
    )
}

/// What a top-level block named `keyword` is, when it is not a workload
/// kind this voodu runs.
pub fn classify(keyword: &str) -> OtherKind {
    if let Some((_, instead)) = VOODU_KINDS.iter().find(|(kind, _)| *kind == keyword) {
        return OtherKind::Unsupported {
            instead: (*instead).to_owned(),
        };
    }
    if let Some(near) = closest(
        keyword,
        ["deployment", "statefulset", "job", "cronjob"].into_iter(),
    ) {
        return OtherKind::Typo(near);
    }
    OtherKind::Unsupported {
        instead: format!(
            "a {keyword} from a voodu plugin macro is not run here; declare what it runs as statefulset \"scope\" \"name\" {{ image = \"...\" }} or deployment \"scope\" \"name\" {{ ... }}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ingress_is_answered_with_the_block_to_write_in_its_deployment() {
        let instead = ingress_instead(
            "prod",
            "api-route",
            Some("api"),
            Some(8080),
            Some("api.example.com"),
        );
        assert!(
            instead.starts_with("write the route inside the deployment it routes to: deployment \"prod\" \"api\" { ... traffik \"http\" { port = 8080 } } (traffik routes by port"),
            "{instead}"
        );
        assert!(instead.contains("\"api.example.com\""), "{instead}");
        let bare = ingress_instead("prod", "web", None, None, None);
        assert!(bare.contains("deployment \"prod\" \"web\""), "{bare}");
        assert!(bare.contains("port = <the deployment's port>"), "{bare}");
    }

    #[test]
    fn voodu_kinds_name_what_to_write_instead_and_typos_stay_typos() {
        match classify("ingress") {
            OtherKind::Unsupported { instead } => assert!(instead.contains("traffik"), "{instead}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(classify("deploymnet"), OtherKind::Typo("deployment"));
        assert_eq!(classify("statfulset"), OtherKind::Typo("statefulset"));
        match classify("postgres") {
            OtherKind::Unsupported { instead } => {
                assert!(instead.contains("voodu plugin macro"), "{instead}")
            }
            other => panic!("{other:?}"),
        }
    }
}
