// Replies as safe Markdown: the text only ever becomes DOM text nodes, and these few
// constructs become elements built here — never HTML from the model or another channel.
// **bold**, *italic* or _italic_, `code`, ``` fenced code ```, "- " / "1. " lists, and
// [links](https://…) to http and https only (anything else stays text).
window.ParleyMarkdown = (() => {
  // Underscores inside a word (PARLEY_LLM_MODEL, snake_case) are no emphasis.
  const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\s][^*\n]*\*|(?<!\w)_[^_\s][^_\n]*_(?!\w))|\[([^\]\n]+)\]\(([^)\s]+)\)/g;
  const ITEM = /^\s*(?:([-*])|(\d+)[.)])\s+(.*)$/;

  function el(name, text) {
    const node = document.createElement(name);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function safeUrl(raw) {
    try {
      const url = new URL(raw);
      return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
    } catch {
      return null;
    }
  }

  function inline(parent, text) {
    let at = 0;
    for (const m of text.matchAll(INLINE)) {
      parent.append(text.slice(at, m.index));
      at = m.index + m[0].length;
      if (m[1]) parent.append(el("code", m[1].slice(1, -1)));
      else if (m[2]) parent.append(el("strong", m[2].slice(2, -2)));
      else if (m[3]) parent.append(el("em", m[3].slice(1, -1)));
      else {
        const href = safeUrl(m[5]);
        if (href === null) { parent.append(m[0]); continue; }
        const a = el("a", m[4]);
        a.href = href;
        a.target = "_blank";
        a.rel = "noopener noreferrer nofollow";
        parent.append(a);
      }
    }
    parent.append(text.slice(at));
  }

  function lines(parent, text) {
    let list = null;
    text.split("\n").forEach((line, i, all) => {
      const item = ITEM.exec(line);
      if (item) {
        const kind = item[1] ? "ul" : "ol";
        if (!list || list.tagName.toLowerCase() !== kind) list = parent.appendChild(el(kind));
        inline(list.appendChild(el("li")), item[3]);
        return;
      }
      list = null;
      inline(parent, line);
      if (i < all.length - 1) parent.append("\n");
    });
  }

  function render(text) {
    const out = document.createDocumentFragment();
    const parts = text.split(/```[^\n`]*\n?/);
    parts.forEach((part, i) => {
      if (i % 2 === 1 && i < parts.length - 1) {
        const pre = el("pre");
        pre.append(el("code", part.replace(/\n$/, "")));
        out.append(pre);
      } else lines(out, part);
    });
    return out;
  }

  return { render };
})();
