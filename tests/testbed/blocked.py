"""Pages that are walls, not content, answering 200 as real ones often do:

- ``/blocked/cloudflare``     Cloudflare's "Just a moment..." managed challenge
- ``/blocked/captcha``        a reCAPTCHA "are you a robot?" interstitial
- ``/blocked/datadome``       DataDome's block page (captcha-delivery.com)
- ``/blocked/perimeterx``     PerimeterX / HUMAN "Press & Hold"
- ``/blocked/cookie-wall``    a consent wall (IAB TCF wording) in front of the article
- ``/blocked/access-denied``  Akamai's "Access Denied" stub
- ``/blocked/enable-js``      a single-page app shell: "You need to enable JavaScript"
- ``/blocked/false-positive`` a long real-looking article that mentions CAPTCHAs in
  passing and carries a reCAPTCHA comment form and a cookie banner: content, not a wall

Every route takes ``?status=N`` to answer with another status (walls also come as 403).
"""

from __future__ import annotations

from .asgi import HTML, Request, Router

router = Router()

CLOUDFLARE = """<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>
<meta http-equiv="Content-Type" content="text/html; charset=UTF-8">
<meta http-equiv="X-UA-Compatible" content="IE=Edge">
<meta name="robots" content="noindex,nofollow">
<meta name="viewport" content="width=device-width,initial-scale=1">
<style>*{box-sizing:border-box;margin:0;padding:0}html{line-height:1.15;
-webkit-text-size-adjust:100%;color:#313131}body{display:flex;flex-direction:column;
height:100vh;min-height:100vh}.main-content{margin:8rem auto;max-width:60rem;
width:100%}</style><meta http-equiv="refresh" content="390"></head>
<body class="no-js"><div class="main-wrapper" role="main"><div class="main-content">
<h1 class="zone-name-title h1">news.example.com</h1>
<h2 id="challenge-running" class="h2">Checking if the site connection is secure</h2>
<noscript><div id="challenge-error-title"><div class="h2"><span class="icon-wrapper">
<div class="heading-icon warning-icon"></div></span><span id="challenge-error-text">
Enable JavaScript and cookies to continue</span></div></div></noscript>
<div id="challenge-body-text" class="core-msg spacer">news.example.com needs to review the
security of your connection before proceeding.</div>
<form id="challenge-form" action="/world/2023/07/article?__cf_chl_f_tk=Xk2dl1Zl7pM" method="POST"
enctype="application/x-www-form-urlencoded"><input type="hidden" name="md"
value="4vq1nT0ZkpwO.Qk7dRh2"></form></div></div>
<script>(function(){window._cf_chl_opt={cvId: '2',cZone: "news.example.com",cType: 'managed',
cNounce: '53071',cRay: '7e5c1f2a9b3d4e6f',cHash: 'a1b2c3d4e5f6a7b',cUPMDTk:
"\\/world\\/2023\\/07\\/article?__cf_chl_tk=Xk2dl1Zl7pM",cFPWv: 'g',cTTimeMs: '1000',
cMTimeMs: '0',cTplV: 5,cTplB: 'cf',cK: "",cRq: {ru: 'aHR0cHM6Ly9uZXdzLmV4YW1wbGUuY29t',
ra: 'TW96aWxsYS81LjA=',rm: 'R0VU',d: 'c2VjcmV0',t: 'MTY5MDAwMDAwMC4wMDAwMDA=',
m: 'bWQ=',i1: 'aTE=',i2: 'aTI=',zh: 'emg=',uh: 'dWg=',hh: 'aGg=',}};
var cpo = document.createElement('script');
cpo.src = '/cdn-cgi/challenge-platform/h/g/orchestrate/managed/v1?ray=7e5c1f2a9b3d4e6f';
window._cf_chl_opt.cOgUHash = location.hash === '' ? '' : location.hash;
document.getElementsByTagName('head')[0].appendChild(cpo);}());</script>
<div class="footer" role="contentinfo"><div class="footer-inner">
<div class="clearfix diagnostic-wrapper"><div class="ray-id">Ray ID: <code>7e5c1f2a9b3d4e6f</code>
</div></div><div class="text-center" id="footer-text">Performance &amp; security by
<a rel="noopener noreferrer" href="https://www.cloudflare.com?utm_source=challenge"
target="_blank">Cloudflare</a></div></div></div></body></html>
"""

CAPTCHA = """<!DOCTYPE html><html><head><meta charset="utf-8">
<title>Are you a robot?</title>
<script src="https://www.google.com/recaptcha/api.js" async defer></script>
<style>body{font-family:arial,sans-serif;margin:40px}</style></head><body>
<div id="main"><h1>Are you a robot?</h1>
<p>Our systems have detected unusual traffic from your computer network. This page checks
to see if it's really you sending the requests, and not a robot.</p>
<form action="/verify" method="post"><div class="g-recaptcha"
data-sitekey="6LfD3PIbAAAAAJs_eEHvoOl75_83eXSqpPSRFJ_u"></div>
<input type="hidden" name="continue" value="https://shop.example.com/item/4711">
<input type="submit" value="Submit"></form>
<p>IP address: 203.0.113.42<br>Time: 2023-07-22T10:15:31Z<br>
URL: https://shop.example.com/item/4711</p></div></body></html>
"""

DATADOME = """<html lang="en"><head><title>shop.example.com</title>
<style>#cmsg{animation: A 1.5s;}@keyframes A{0%{opacity:0;}99%{opacity:0;}100%{opacity:1;}}
</style></head><body style="margin:0"><p id="cmsg">Please enable JS and disable any ad
blocker</p><script data-cfasync="false">var dd={'rt':'c','cid':'AHrlqAAAAAMAjWqbV4mZ',
'hsh':'2211F522B61E269B869FA6EAFFB5E1','t':'fe','s':17434,'e':'d0f8b3','host':
'geo.captcha-delivery.com'}</script><script data-cfasync="false"
src="https://ct.captcha-delivery.com/c.js"></script></body></html>
"""

PERIMETERX = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Access to this page has been denied</title>
<style>.container{align-items:center;display:flex;flex:1;justify-content:space-between;
flex-direction:column;height:100%}.page-title-wrapper{flex-grow:2}</style>
<script>window._pxAppId = 'PXu6b0qd2S';window._pxJsClientSrc = '/u6b0qd2S/init.js';
window._pxFirstPartyEnabled = true;window._pxHostUrl = '/u6b0qd2S/xhr';
window._pxreCaptchaTheme = 'light';</script></head><body>
<section class="container"><div class="page-title-wrapper"><div class="page-title">
<h1>Before we continue...</h1></div></div><div class="content-wrapper"><div class="content">
<p>Press &amp; Hold to confirm you are<br>a human (and not a bot).</p>
<div id="px-captcha"></div></div></div><div class="page-footer-wrapper">
<div class="page-footer"><p>Reference ID 1a2b3c4d-5e6f-11ee-8c90-0242ac120002</p></div>
</div></section><script src="/u6b0qd2S/captcha/captcha.js?a=c&amp;m=0"></script></body></html>
"""

COOKIE_WALL = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Daily Example - Your privacy choices</title></head><body>
<div class="consent-wall" role="dialog" aria-modal="true"><h1>We value your privacy</h1>
<p>We and our partners store and/or access information on a device, such as cookies and
process personal data, such as unique identifiers and standard information sent by a device
for personalised ads and content, ad and content measurement, and audience insights, as well
as to develop and improve products.</p>
<p>With your permission we and our partners may use precise geolocation data and
identification through device scanning. You may click to consent to our and our partners'
processing as described above. Alternatively you may access more detailed information and
change your preferences before consenting or to refuse consenting.</p>
<p>Please note that some processing of your personal data may not require your consent, but
you have a right to object to such processing. Your preferences will apply to this website
only. You can change your preferences at any time by returning to this site or visiting our
privacy policy.</p>
<div class="buttons"><button>Accept all</button><button>Reject all</button>
<button>Manage preferences</button></div></div></body></html>
"""

ACCESS_DENIED = """<HTML><HEAD>
<TITLE>Access Denied</TITLE>
</HEAD><BODY>
<H1>Access Denied</H1>

You don't have permission to access
"http&#58;&#47;&#47;www&#46;example&#46;com&#47;news&#47;" on this server.<P>
Reference&#32;&#35;18&#46;2f1e3b17&#46;1690000000&#46;5a6b7c8d
<P>https&#58;&#47;&#47;errors&#46;edgesuite&#46;net&#47;18&#46;2f1e3b17&#46;1690000000&#46;
5a6b7c8d</P>
</BODY>
</HTML>
"""

ENABLE_JS = """<!doctype html><html lang="en"><head><meta charset="utf-8"/>
<link rel="icon" href="/favicon.ico"/>
<meta name="viewport" content="width=device-width,initial-scale=1"/>
<meta name="theme-color" content="#000000"/><title>Example Markets</title>
<script defer="defer" src="/static/js/main.8f3a2c1d.js"></script>
<link href="/static/css/main.4b2e7f90.css" rel="stylesheet"></head>
<body><noscript>You need to enable JavaScript to run this app.</noscript>
<div id="root"></div></body></html>
"""

_FALSE_POSITIVE_PARAGRAPHS = (
    "When tickets for the reunion tour went on sale at ten o'clock on Tuesday morning, more "
    "than two million people were already waiting in the virtual queue. Within forty minutes "
    "every seat in the first twelve stadiums had been sold, and within the hour the same "
    "tickets were on offer on resale sites at four and five times their face value.",
    "Promoters blamed automated buying software. Scalpers run fleets of scripts that hold "
    "places in the queue, fill in payment forms in milliseconds and move on to the next "
    "event before a human fan has finished typing a card number. The sellers say they "
    "blocked several hundred thousand such attempts, but concede that many got through.",
    "The usual defences have not kept up. A CAPTCHA at checkout slows people down more than "
    "it slows the bots, which now hand the puzzles to cheap solving services, and limits on "
    "tickets per account are easy to get around with thousands of freshly registered "
    "accounts. Some venues have tried verified-fan schemes, in which buyers register weeks "
    "ahead and receive a personal code, with mixed results.",
    "Consumer groups want a different fix. They argue that resale prices should be capped "
    "at face value plus a small fee, as they already are in several countries, so that "
    "buying in bulk stops paying. Where such caps exist, they say, the secondary market for "
    "the most popular concerts has shrunk to a fraction of its former size.",
    "The industry is divided. Primary sellers welcome the idea in public but warn that caps "
    "push resale onto social media and messaging apps, where fraud is common and buyers have "
    "no protection. Resale platforms argue that fans should be free to sell a ticket they "
    "can no longer use for whatever someone will pay.",
    "Lawmakers have promised hearings in the autumn. In the meantime the band has asked fans "
    "not to buy from unofficial sellers, and says that tickets bought above face value may "
    "be cancelled at the door. Further dates, it added, will be announced for next spring, "
    "and will go on sale only to fans who register in advance.",
    "For those who missed out this time, the advice from consumer groups is simple: wait. "
    "Prices on resale sites usually fall sharply in the last days before a show, when "
    "sellers who bought in bulk need to get rid of their stock.",
)

FALSE_POSITIVE = (
    """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Bots snapped up the reunion tour tickets. Can anything stop them? - Daily Example</title>
<script src="https://www.google.com/recaptcha/api.js" async defer></script>
<script src="https://cdn.cookielaw.org/scripttemplates/otSDKStub.js"></script></head><body>
<header><nav><a href="/">Home</a> <a href="/music">Music</a> <a href="/money">Money</a></nav>
</header><main><article><h1>Bots snapped up the reunion tour tickets. Can anything stop
them?</h1><p class="byline">By Jane Example, consumer affairs correspondent</p>
"""
    + "\n".join(f"<p>{p}</p>" for p in _FALSE_POSITIVE_PARAGRAPHS)
    + """
</article><section class="comments"><h2>Comments</h2><form action="/comments" method="post">
<textarea name="comment"></textarea><div class="g-recaptcha" data-sitekey="6LfD3PIbAAAAAJs"></div>
<button>Post comment</button></form></section></main>
<div id="onetrust-banner-sdk"><p>We use cookies to improve your experience. By continuing you
agree to our cookie policy.</p><button>Accept all cookies</button></div>
<footer><p>&copy; 2023 Daily Example</p></footer></body></html>
"""
)

PAGES: dict[str, str] = {
    "cloudflare": CLOUDFLARE,
    "captcha": CAPTCHA,
    "datadome": DATADOME,
    "perimeterx": PERIMETERX,
    "cookie-wall": COOKIE_WALL,
    "access-denied": ACCESS_DENIED,
    "enable-js": ENABLE_JS,
    "false-positive": FALSE_POSITIVE,
}


@router.route("/blocked/{kind}")
async def blocked(req: Request) -> None:
    body = PAGES.get(req.params["kind"])
    if body is None:
        await req.respond(404, b"<html><body><h1>404 Not Found</h1></body></html>", HTML)
        return
    try:
        status = int(req.query.get("status") or 200)
    except ValueError:
        status = 200
    await req.respond(status if 200 <= status <= 599 else 200, body.encode("utf-8"), HTML)
