// What a person is known as, and what in their conversation may need an operator.
import { h } from "./dom.js";

export function stateBadges(state) {
  return [
    state.owes_reply ? h("span", { class: "badge warn" }, "awaiting reply") : null,
    state.failed_deliveries ? h("span", { class: "badge bad" }, `${state.failed_deliveries} failed deliveries`) : null,
    state.archive_errors ? h("span", { class: "badge bad" }, `${state.archive_errors} archive errors`) : null,
    state.pairing_pending ? h("span", { class: "badge warn" }, "pairing pending") : null,
  ];
}

export function identityBadges(person) {
  return person.identities.map((i) => h("span", { class: "badge" }, `${i.channel} · ${i.display_name || i.external_id}`));
}
