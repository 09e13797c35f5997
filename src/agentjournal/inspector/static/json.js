// JSON text pretty-printed as JSON.stringify(value, null, 2) would, except that no number is ever
// read into a JS Number: 12345678901234567890, 9007199254740993 and 59.90 are shown as written
// (through JSON.parse they would become 12345678901234567000, 9007199254740992 and 59.9).

// One token after optional whitespace: punctuation, a string, a number, a literal, or the end.
// A string's escapes are checked by JSON.parse when it is decoded.
const TOKEN =
  /[ \t\n\r]*(?:([{}[\]:,])|("(?:[^"\\\u0000-\u001f]|\\.)*")|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)|(true|false|null)|$)/y;

/** `text` pretty-printed with `indent`, numbers as written; throws SyntaxError if not JSON. */
export function prettyJson(text, indent = "  ") {
  const tokens = new RegExp(TOKEN); // its own lastIndex: the position in `text`
  let token = null; // [punctuation, string, number, literal], or null at the end of the text
  const fail = () => {
    throw new SyntaxError("not JSON");
  };
  const advance = () => {
    const found = tokens.exec(text);
    if (found === null) fail();
    token = found.slice(1).some((part) => part !== undefined) ? found.slice(1) : null;
  };
  const punctuation = (char) => token !== null && token[0] === char;
  const take = (char) => {
    if (!punctuation(char)) fail();
    advance();
  };
  // A string decoded and written again: an escape such as \u8ba2 becomes the character itself.
  const string = () => {
    if (token === null || token[1] === undefined) fail();
    const written = JSON.stringify(JSON.parse(token[1]));
    advance();
    return written;
  };

  const value = (depth) => {
    if (token === null) fail();
    const [open, , number, literal] = token;
    if (open === undefined) {
      if (token[1] !== undefined) return string();
      advance();
      return number ?? literal;
    }
    const close = { "{": "}", "[": "]" }[open];
    if (close === undefined) fail();
    advance();
    if (punctuation(close)) {
      advance();
      return open + close;
    }
    const inner = `\n${indent.repeat(depth + 1)}`;
    const members = [];
    for (;;) {
      let key = "";
      if (open === "{") {
        key = `${string()}: `;
        take(":");
      }
      members.push(key + value(depth + 1));
      if (!punctuation(",")) break;
      advance();
    }
    take(close);
    return `${open}${inner}${members.join(`,${inner}`)}\n${indent.repeat(depth)}${close}`;
  };

  advance();
  const result = value(0);
  if (token !== null) fail();
  return result;
}
