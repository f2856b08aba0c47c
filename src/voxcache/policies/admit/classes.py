"""Text classes a take may be refused for: what a line that names a person's data looks like.

Each class (``[admission] never_store``) is a detector over the request's NFKC-normalised
text, in English and Chinese. Detectors lean towards refusing: a false match costs one
take served but not stored, a miss keeps someone's data on disk. Phone numbers go through
``phonenumbers`` (libphonenumber); the rest are regular expressions.
docs/operating/admission.md lists each class with examples of what it catches.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable

from ...errors import InvalidParameter

Detector = Callable[[str], bool]

# -- numbers ---------------------------------------------------------------------------
_EN_NUMBER_WORDS = (
    "zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|"
    "fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fourty|"
    "fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|billion|trillion|dozen|"
    "third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
    "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
    "thirtieth|fortieth|fiftieth|sixtieth|seventieth|eightieth|ninetieth|hundredth|"
    "thousandth|millionth|oh-one|double|triple")
_EN_NUMBER = re.compile(rf"\b(?:{_EN_NUMBER_WORDS})\b", re.IGNORECASE)
ZH_NUMERALS = "〇零一二三四五六七八九十百千万亿两壹贰叁肆伍陆柒捌玖拾佰仟萬億兩"
"""Chinese numerals, everyday and financial forms (simplified and traditional)."""
_ZH_NOT_ONE = ZH_NUMERALS.replace("一", "")
_ZH_MEASURES = ("号號个個位次点點分秒元块塊角毛岁歲年月日天周週层層楼樓路站张張件份名"
                "等米斤公克度倍折台辆輛排座栋棟室单單期届屆班趟页頁章节節条條")
_ZH_NUMBER = re.compile(
    rf"[{ZH_NUMERALS}]{{2,}}"                      # 四十二, 一二三四, 两千
    rf"|第[{ZH_NUMERALS}]"                          # 第三
    rf"|[{_ZH_NOT_ONE}][{_ZH_MEASURES}]"           # 三个, 五号 (一 alone is "a")
    rf"|一[号號月日岁歲年楼樓层層路站元块塊点點]")  # 一号, 一月
_DIGITS = re.compile(r"\d|[\u2150-\u218B\u2460-\u24FF\u2776-\u2793\u3220-\u3229\u3280-\u3289]")
"""Any decimal digit in any script (``\\d`` is Unicode-aware), plus Roman numerals and
circled or parenthesised numbers (①, ⑴, ㈠)."""
_NUMBER_WORD = rf"(?:\d+|(?:{_EN_NUMBER_WORDS})(?:[\s-]+(?:{_EN_NUMBER_WORDS}))*|[{ZH_NUMERALS}]+)"
"""A number as digits, English words or Chinese numerals (inside other classes)."""

# -- contact -----------------------------------------------------------------------------
_EMAIL = re.compile(r"[\w.+%-]+@[\w-]+(?:\.[\w-]+)+"
                    r"|\b\w+(?:\s+dot\s+\w+)*\s+at\s+\w+(?:\s+dot\s+\w+)+\b", re.IGNORECASE)
_TLDS = ("com|org|net|edu|gov|io|ai|co|cn|uk|de|fr|jp|us|ru|info|biz|me|tv|app|dev|xyz|"
         "hk|tw|sg|au|ca|in|br|it|es|nl|eu")
_URL = re.compile(rf"\b(?:https?|ftp)://\S+|\bwww\.\S+|\b[\w-]+(?:\.[\w-]+)*\.(?:{_TLDS})\b"
                  rf"(?:/\S*)?|\b[\w-]+\s+dot\s+(?:{_TLDS})\b", re.IGNORECASE)
_PHONE_REGIONS = ("US", "GB", "CN", "HK", "TW", "SG", "AU", "CA", "IN", "DE", "FR", "JP")
"""Regions whose number formats ``phone`` recognises (any number written with ``+`` and
a country code is recognised whatever its region)."""
_PHONE_SHAPE = re.compile(r"\+?\(?\d[\d\s().-]{5,}\d")
"""Seven or more digits with separators: what a number read out or typed looks like."""

# -- money, dates, times -------------------------------------------------------------------
_CURRENCY_SIGNS = "$€£¥￥₹₩₽₺₪฿₫"
_CURRENCY_WORDS = ("dollars?|bucks?|cents?|euros?|pounds?|pence|quid|yen|yuan|renminbi|rmb|"
                   "usd|eur|gbp|cny|jpy|hkd|rupees?|won")
_MONEY = re.compile(
    rf"[{_CURRENCY_SIGNS}]\s*{_NUMBER_WORD}|{_NUMBER_WORD}\s*[{_CURRENCY_SIGNS}]"
    rf"|\b{_NUMBER_WORD}\s+(?:{_CURRENCY_WORDS})\b"
    rf"|[{ZH_NUMERALS}\d]+\s*(?:元|块|塊|角|毛|分钱|美元|美金|欧元|歐元|英镑|英鎊|日元|港币|港幣|人民币|人民幣)"
    rf"|(?:人民币|人民幣|美元|欧元|港币)\s*[{ZH_NUMERALS}\d]",
    re.IGNORECASE)
_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|"
           "december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_DATE = re.compile(
    r"\b\d{4}\s*[-/.]\s*\d{1,2}\s*[-/.]\s*\d{1,2}\b|\b\d{1,2}\s*[-/.]\s*\d{1,2}\s*[-/.]\s*\d{2,4}\b"
    rf"|\b(?:{_MONTHS})\.?\s+(?:the\s+)?{_NUMBER_WORD}(?:st|nd|rd|th)?\b"
    rf"|\b{_NUMBER_WORD}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b"
    rf"|\b(?:{_MONTHS})\s+(?:first|second)\b|\b(?:first|second)\s+of\s+(?:{_MONTHS})\b"
    rf"|[{ZH_NUMERALS}\d]+\s*[年月]\s*(?:[{ZH_NUMERALS}\d]+\s*[月日号號])?"
    rf"|[{ZH_NUMERALS}\d]+\s*[日号號](?![码碼])|(?:星期|礼拜|禮拜|周|週)[一二三四五六日天]",
    re.IGNORECASE)
_TIME = re.compile(
    r"\b\d{1,2}\s*[:.：]\s*\d{2}(?:\s*[:.]\s*\d{2})?\b"
    rf"|\b{_NUMBER_WORD}\s*(?:a\.?m\.?|p\.?m\.?|o'?clock|hours?|hrs?|minutes?|mins?|seconds?"
    r"|in\s+the\s+(?:morning|afternoon|evening)|at\s+night)(?![\w])"
    rf"|\b(?:at|by|until|till|before|after|from)\s+(?:{_EN_NUMBER_WORDS}|noon|midnight)\b"
    rf"|\b(?:half|quarter)\s+(?:past|to)\s+{_NUMBER_WORD}"
    rf"|[{ZH_NUMERALS}\d]+\s*(?:点钟|點鐘|点半|點半|小时|小時|分钟|分鐘|秒钟|秒鐘)"
    rf"|[{_ZH_NOT_ONE}\d]+\s*[点點](?:\s*[{ZH_NUMERALS}\d]+\s*分)?"
    rf"|(?:上午|下午|晚上|早上|中午|凌晨)\s*[{ZH_NUMERALS}\d]",
    re.IGNORECASE)

# -- spelled-out codes ---------------------------------------------------------------------
_NATO = ("alpha|alfa|bravo|charlie|delta|echo|foxtrot|golf|hotel|india|juliet|juliett|kilo|"
         "lima|mike|november|oscar|papa|quebec|romeo|sierra|tango|uniform|victor|whiskey|"
         "x-ray|xray|yankee|zulu")
_CODE = re.compile(
    r"(?<![\w'])[A-Za-z0-9](?:[\s.,-]+[A-Za-z0-9](?![\w'])){2,}"   # A B 1 2 3, X-Y-Z
    r"|\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{3,}\b"            # AB12CD, QX7
    r"|(?-i:\b[A-Z]{2,}[-/][A-Z0-9]{2,}\b)"                          # ABC-XYZ (capitals)
    rf"|\b(?:{_NATO})(?:[\s,-]+(?:{_NATO})){{2,}}\b",               # alpha bravo charlie
    re.IGNORECASE)
_SINGLE_WORDS = {"a", "i", "o"}
"""One-letter English words: a run of them is a sentence ("I, a, ..."), not a code."""


def _code(text: str) -> bool:
    for match in _CODE.finditer(text):
        letters = re.findall(r"[A-Za-z0-9]+", match.group())
        if not all(part.lower() in _SINGLE_WORDS for part in letters):
            return True
    return False


def _phone(text: str) -> bool:
    if _PHONE_SHAPE.search(text) is None:
        return False  # the matcher costs ~100x more: only where digits could make a number
    import phonenumbers

    for region in _PHONE_REGIONS:
        matcher = phonenumbers.PhoneNumberMatcher(text, region,
                                                  leniency=phonenumbers.Leniency.POSSIBLE)
        if matcher.has_next():
            return True
    return bool(re.search(r"\d(?:[\s().-]*\d){6,}", text))  # 7+ digits: a number all the same


def _searcher(pattern: re.Pattern[str]) -> Detector:
    return lambda text: pattern.search(text) is not None


BUILT_IN: dict[str, Detector] = {
    "digits": _searcher(_DIGITS),
    "numbers": lambda text: _EN_NUMBER.search(text) is not None or (
        _ZH_NUMBER.search(text) is not None),
    "email": _searcher(_EMAIL),
    "url": _searcher(_URL),
    "phone": _phone,
    "money": _searcher(_MONEY),
    "date": _searcher(_DATE),
    "time": _searcher(_TIME),
    "code": _code,
}
"""Each built-in class and its detector (over NFKC text)."""

PATTERN_PREFIX = "re:"


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidParameter(f"[admission] never_store pattern {pattern!r} is not a valid "
                               f"regular expression: {exc}") from None


class TextRules:
    """The classes one tenant never stores, checked in the order they are named."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        self._checks: list[tuple[str, Detector]] = []
        for name in self.names:
            if not isinstance(name, str):
                raise InvalidParameter(f"[admission] never_store takes class names and "
                                       f"\"re:PATTERN\" strings, got {name!r}")
            if name.startswith(PATTERN_PREFIX):
                pattern = _compiled(name[len(PATTERN_PREFIX):])
                self._checks.append(("pattern", _searcher(pattern)))
            elif name in BUILT_IN:
                self._checks.append((name, BUILT_IN[name]))
            else:
                raise InvalidParameter(
                    f"[admission] never_store: unknown class {name!r}; the classes are "
                    f"{', '.join(BUILT_IN)}, or \"re:PATTERN\" for a pattern of your own")

    def __bool__(self) -> bool:
        return bool(self._checks)

    def match(self, text: str) -> str | None:
        """The first class ``text`` falls in (``pattern`` for an operator's own), or None.
        Never the matched text: the class name is all that leaves this function."""
        if not self._checks:
            return None
        folded = unicodedata.normalize("NFKC", text)
        for name, check in self._checks:
            if check(folded) or (folded != text and check(text)):
                return name
        return None
